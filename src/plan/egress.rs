//! A box's egress policy and the proxy's decision for one destination (docs/security.md "Network").
//!
//! The proxy decides in two steps so that a name no entry lists is refused before any DNS
//! query leaves the node: [`Policy::decide`] on the name and port alone, then, for a listed
//! name, [`Policy::admit`] on the addresses it resolved to. Loopback, private, link-local,
//! metadata and other special addresses are reached only when an IP or CIDR entry covers the
//! address itself; a listed name that resolves there is refused (no DNS rebinding into the
//! node's own services). IPv4 carried in IPv6 (mapped, NAT64, 6to4) is judged as IPv4.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where the proxy listens inside every box's network namespace.
pub(crate) const PROXY_PORT: u16 = 3128;

/// Ports an entry without one admits.
pub(crate) const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// `network=` of a box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// Own namespace; the proxy admits what the node's list and the box's entries name.
    Allow,
    /// Own namespace; the proxy refuses everything.
    None,
    /// The host's network, unguarded.
    Host,
}

impl Mode {
    pub(crate) fn parse(v: &str) -> Option<Mode> {
        match v {
            "allow" => Some(Mode::Allow),
            "none" => Some(Mode::None),
            "host" => Some(Mode::Host),
            _ => None,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Allow => "allow",
            Mode::None => "none",
            Mode::Host => "host",
        }
    }

    /// The box gets its own network namespace and proxy.
    pub(crate) fn isolated(self) -> bool {
        self != Mode::Host
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What an entry's host part names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Name(String),
    /// `*.suffix`: any name below `suffix` (not `suffix` itself).
    Suffix(String),
    Net {
        addr: IpAddr,
        prefix: u8,
    },
}

/// One allow-list entry: `host`, `*.suffix`, `IP` or `CIDR`, each optionally with `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    text: String,
    target: Target,
    port: Option<u16>,
}

impl Entry {
    pub(crate) fn parse(text: &str) -> Result<Entry, String> {
        let text = text.trim();
        let bad = |why: &str| format!("allow-list entry '{text}': {why}");
        let (host, port) = split_port(text).map_err(|w| bad(&w))?;
        let host = host.to_ascii_lowercase();
        let target = if let Some((addr, prefix)) = host.split_once('/') {
            let addr = canonical(addr.parse().map_err(|_| bad("not an IP network"))?);
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| bad(&format!("the prefix length must be 0 to {max}")))?;
            Target::Net { addr, prefix }
        } else if let Ok(addr) = host.parse::<IpAddr>() {
            let addr = canonical(addr);
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            Target::Net { addr, prefix }
        } else if let Some(suffix) = host.strip_prefix("*.") {
            Target::Suffix(valid_name(suffix).ok_or_else(|| bad("not a host name"))?)
        } else {
            Target::Name(valid_name(&host).ok_or_else(|| bad("not a host name"))?)
        };
        Ok(Entry {
            text: text.to_string(),
            target,
            port,
        })
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    fn admits_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    fn admits_name(&self, name: &str, port: u16) -> bool {
        self.admits_port(port)
            && match &self.target {
                Target::Name(n) => n == name,
                Target::Suffix(s) => name
                    .strip_suffix(s.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                Target::Net { .. } => false,
            }
    }

    fn admits_addr(&self, addr: IpAddr, port: u16) -> bool {
        self.admits_port(port)
            && match self.target {
                Target::Net { addr: net, prefix } => in_net(addr, net, prefix),
                _ => false,
            }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `host:port`, `[v6]:port`, `cidr:port`, or a bare v6 address or network (no port).
fn split_port(text: &str) -> Result<(String, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("invalid port '{p}'"))
    };
    if text.is_empty() {
        return Err("empty".into());
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or("unclosed '['")?;
        return match tail {
            "" => Ok((host.to_string(), None)),
            t => match t.strip_prefix(':') {
                Some(p) => Ok((host.to_string(), Some(port(p)?))),
                None => Err(format!("unexpected '{t}' after ']'")),
            },
        };
    }
    // None, or more than one (an IPv6 address or network; a port needs the brackets): no port.
    if text.matches(':').count() != 1 {
        return Ok((text.to_string(), None));
    }
    let (host, p) = text.split_once(':').ok_or("no port")?;
    Ok((host.to_string(), Some(port(p)?)))
}

fn valid_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    ok.then(|| name.to_ascii_lowercase())
}

/// The policy the proxy reads, in a box's run dir (rewritten to apply a change live).
pub(crate) fn policy_file(run_dir: &Path) -> PathBuf {
    run_dir.join("egress.json")
}

/// The proxy's decisions, one JSON line each, in a box's run dir.
pub(crate) fn log_file(run_dir: &Path) -> PathBuf {
    run_dir.join("egress.log")
}

/// Installed by `install.sh` from the top-level `egress-allow.txt`.
pub(crate) const NODE_LIST: &str = "/etc/box/egress-allow.txt";

/// The node's list: one entry per line, `#` starts a comment. Lines that are no entry are
/// returned apart (the proxy skips them: a typo never widens what a box may reach).
pub(crate) fn parse_list(text: &str) -> (Vec<Entry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match Entry::parse(line) {
            Ok(e) => entries.push(e),
            Err(e) => bad.push(format!("line {}: {e}", i + 1)),
        }
    }
    (entries, bad)
}

/// What the proxy reads from the box's run dir: the record's policy, as `up` and `set` wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BoxPolicy {
    pub mode: Mode,
    #[serde(default)]
    pub allow: Vec<String>,
}

impl BoxPolicy {
    /// The effective policy: the node's entries, then the box's.
    pub(crate) fn with_node_entries(&self, node: Vec<Entry>) -> Result<Policy, String> {
        let mut entries = node;
        for e in &self.allow {
            entries.push(Entry::parse(e)?);
        }
        Ok(Policy {
            mode: self.mode,
            entries,
        })
    }
}

/// A box's entries as `set allow=` takes them: comma-separated, empty for none.
pub(crate) fn parse_box_entries(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| Entry::parse(e).map(|_| e.to_string()))
        .collect()
}

/// IPv4 carried in IPv6 (mapped, NAT64 well-known prefix, 6to4) as IPv4; anything else as is.
pub(crate) fn canonical(addr: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = addr else {
        return addr;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let o = v6.octets();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if s[0] == 0x2002 {
        return IpAddr::V4(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    addr
}

fn in_net(addr: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (canonical(addr), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Addresses that belong to some machine's own services rather than to the internet.
/// The first match names the kind; metadata endpoints come before the ranges that hold them.
const SPECIAL: &[(&str, &str)] = &[
    ("169.254.169.254/32", "cloud metadata"),
    ("169.254.170.2/32", "cloud metadata"),
    ("100.100.100.200/32", "cloud metadata"),
    ("168.63.129.16/32", "cloud metadata"),
    ("fd00:ec2::254/128", "cloud metadata"),
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "reserved"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("::1/128", "loopback"),
    ("::/128", "unspecified"),
    ("::/96", "reserved"),
    ("64:ff9b:1::/48", "private"),
    ("fc00::/7", "private"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "private"),
    ("ff00::/8", "multicast"),
];

/// What kind of special address this is, if it is one.
pub(crate) fn special(addr: IpAddr) -> Option<&'static str> {
    let addr = canonical(addr);
    SPECIAL.iter().find_map(|(net, kind)| {
        let (a, p) = net.split_once('/')?;
        let net: IpAddr = a.parse().ok()?;
        let prefix: u8 = p.parse().ok()?;
        in_net(addr, net, prefix).then_some(*kind)
    })
}

/// A destination as the proxy was asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Name(String),
    Addr(IpAddr),
}

impl Host {
    /// The host of a request (`name`, `1.2.3.4`, `[::1]`).
    pub(crate) fn parse(text: &str) -> Option<Host> {
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(addr) = bare.parse::<IpAddr>() {
            return Some(Host::Addr(addr));
        }
        valid_name(text).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Addr(a) => write!(f, "{a}"),
        }
    }
}

/// A plain-HTTP request's `Host` header names the host and port the proxy judged (from the
/// request's absolute URI): else a box could have an allowed address serve another site
/// (domain fronting). Names compare without case; port 80 may be left out.
pub(crate) fn host_header_matches(header: &str, host: &str, port: u16) -> bool {
    let header = header.trim();
    let (h, p) = match header.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') && !h.is_empty() => match p.parse::<u16>() {
            Ok(p) => (h, p),
            Err(_) => return false,
        },
        _ => (header, 80),
    };
    let h = h
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(h);
    p == port && h.eq_ignore_ascii_case(host)
}

/// The `Host` a plain-HTTP request goes out with: the judged host (an IPv6 address bracketed),
/// and the port unless it is 80.
pub(crate) fn host_header(host: &str, port: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == 80 {
        host
    } else {
        format!("{host}:{port}")
    }
}

/// The proxy's answer for one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Connect to these addresses (in order), admitted by `rule`.
    Allow {
        rule: String,
        addrs: Vec<IpAddr>,
    },
    Refuse {
        reason: String,
    },
}

/// After looking at the name alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    Done(Decision),
    /// A listed name: resolve it, then [`Policy::admit`].
    Resolve {
        rule: String,
    },
}

/// The effective policy of a box on this node: its mode, the node's entries and its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    pub mode: Mode,
    pub entries: Vec<Entry>,
}

fn refuse(reason: String) -> Decision {
    Decision::Refuse { reason }
}

impl Policy {
    pub(crate) fn decide(&self, host: &Host, port: u16) -> Lookup {
        if self.mode != Mode::Allow {
            return Lookup::Done(refuse(format!("network={}", self.mode)));
        }
        match host {
            Host::Addr(addr) => {
                let addr = canonical(*addr);
                Lookup::Done(
                    match self.entries.iter().find(|e| e.admits_addr(addr, port)) {
                        Some(e) => Decision::Allow {
                            rule: e.text.clone(),
                            addrs: vec![addr],
                        },
                        None => refuse(match special(addr) {
                            Some(kind) => format!("{kind} address {addr}:{port} is not listed"),
                            None => format!("{addr}:{port} is not listed"),
                        }),
                    },
                )
            }
            Host::Name(name) => match self.entries.iter().find(|e| e.admits_name(name, port)) {
                Some(e) => Lookup::Resolve {
                    rule: e.text.clone(),
                },
                None => Lookup::Done(refuse(format!("{name}:{port} is not listed"))),
            },
        }
    }

    /// A listed name's addresses: the special ones only where an entry covers the address.
    pub(crate) fn admit(
        &self,
        rule: String,
        name: &str,
        port: u16,
        resolved: &[IpAddr],
    ) -> Decision {
        let mut addrs = Vec::new();
        let mut refused = None;
        for addr in resolved.iter().map(|a| canonical(*a)) {
            match special(addr) {
                Some(kind) if !self.entries.iter().any(|e| e.admits_addr(addr, port)) => {
                    refused.get_or_insert((kind, addr));
                }
                _ if !addrs.contains(&addr) => addrs.push(addr),
                _ => {}
            }
        }
        match (addrs.is_empty(), refused) {
            (false, _) => Decision::Allow { rule, addrs },
            (true, Some((kind, addr))) => refuse(format!(
                "{name} resolves to {kind} address {addr}, which is not listed"
            )),
            (true, None) => refuse(format!("{name} does not resolve")),
        }
    }
}

/// The box's environment that sends its agents and tools through the proxy.
pub(crate) fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    [
        ("HTTP_PROXY", url.as_str()),
        ("HTTPS_PROXY", url.as_str()),
        ("http_proxy", url.as_str()),
        ("https_proxy", url.as_str()),
        ("NO_PROXY", "localhost,127.0.0.1,::1"),
        ("no_proxy", "localhost,127.0.0.1,::1"),
        ("NODE_USE_ENV_PROXY", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn policy(mode: Mode, entries: &[&str]) -> Policy {
        Policy {
            mode,
            entries: entries.iter().map(|e| Entry::parse(e).unwrap()).collect(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn allow(rule: &str, addrs: &[&str]) -> Decision {
        Decision::Allow {
            rule: rule.into(),
            addrs: addrs.iter().map(|a| ip(a)).collect(),
        }
    }

    fn refused(reason: &str) -> Decision {
        Decision::Refuse {
            reason: reason.into(),
        }
    }

    /// The whole decision for `host:port`, resolving names through `dns`.
    fn decide(p: &Policy, host: &str, port: u16, dns: &[&str]) -> Decision {
        let h = Host::parse(host).unwrap();
        match p.decide(&h, port) {
            Lookup::Done(d) => d,
            Lookup::Resolve { rule } => {
                let addrs: Vec<IpAddr> = dns.iter().map(|a| ip(a)).collect();
                p.admit(rule, &h.to_string(), port, &addrs)
            }
        }
    }

    #[test]
    fn entries_parse_into_targets_and_ports() {
        let cases: Vec<(&str, Target, Option<u16>)> = vec![
            (
                "api.anthropic.com",
                Target::Name("api.anthropic.com".into()),
                None,
            ),
            (
                "GitHub.com.:22",
                Target::Name("github.com".into()),
                Some(22),
            ),
            (
                "*.githubusercontent.com",
                Target::Suffix("githubusercontent.com".into()),
                None,
            ),
            (
                "10.200.0.1",
                Target::Net {
                    addr: ip("10.200.0.1"),
                    prefix: 32,
                },
                None,
            ),
            (
                "10.200.0.1:8081",
                Target::Net {
                    addr: ip("10.200.0.1"),
                    prefix: 32,
                },
                Some(8081),
            ),
            (
                "10.0.0.0/8:8080",
                Target::Net {
                    addr: ip("10.0.0.0"),
                    prefix: 8,
                },
                Some(8080),
            ),
            (
                "fd00::/8",
                Target::Net {
                    addr: ip("fd00::"),
                    prefix: 8,
                },
                None,
            ),
            (
                "[fd00::1]:443",
                Target::Net {
                    addr: ip("fd00::1"),
                    prefix: 128,
                },
                Some(443),
            ),
            (
                "::ffff:10.1.2.3",
                Target::Net {
                    addr: ip("10.1.2.3"),
                    prefix: 32,
                },
                None,
            ),
        ];
        for (text, target, port) in cases {
            assert_eq!(
                Entry::parse(text),
                Ok(Entry {
                    text: text.into(),
                    target,
                    port
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        let cases = [
            ("", "allow-list entry '': empty"),
            ("host:0", "allow-list entry 'host:0': invalid port '0'"),
            (
                "host:http",
                "allow-list entry 'host:http': invalid port 'http'",
            ),
            (
                "10.0.0.0/33",
                "allow-list entry '10.0.0.0/33': the prefix length must be 0 to 32",
            ),
            ("x/8", "allow-list entry 'x/8': not an IP network"),
            ("a b", "allow-list entry 'a b': not a host name"),
            ("*.", "allow-list entry '*.': not a host name"),
            ("[::1", "allow-list entry '[::1': unclosed '['"),
            (
                "[::1]x",
                "allow-list entry '[::1]x': unexpected 'x' after ']'",
            ),
        ];
        for (text, err) in cases {
            assert_eq!(Entry::parse(text), Err(err.to_string()), "{text}");
        }
    }

    #[test]
    fn node_list_skips_comments_and_names_the_bad_line() {
        let list = "# agents\napi.openai.com   # Codex\n\nnot a host\n*.x.ai\n";
        let (entries, bad) = parse_list(list);
        assert_eq!(
            entries.iter().map(Entry::text).collect::<Vec<_>>(),
            vec!["api.openai.com", "*.x.ai"]
        );
        assert_eq!(
            bad,
            vec!["line 4: allow-list entry 'not a host': not a host name"]
        );
        assert_eq!(
            parse_box_entries(" a.com, 10.0.0.1:80 ,,"),
            Ok(vec!["a.com".to_string(), "10.0.0.1:80".to_string()])
        );
        assert_eq!(parse_box_entries(""), Ok(vec![]));
    }

    #[test]
    fn special_addresses_are_named() {
        let cases = [
            ("127.0.0.1", Some("loopback")),
            ("::1", Some("loopback")),
            ("10.200.0.2", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.1.1", Some("private")),
            ("fd12::1", Some("private")),
            ("169.254.1.1", Some("link-local")),
            ("fe80::1", Some("link-local")),
            ("169.254.169.254", Some("cloud metadata")),
            ("100.100.100.200", Some("cloud metadata")),
            ("168.63.129.16", Some("cloud metadata")),
            ("fd00:ec2::254", Some("cloud metadata")),
            ("100.64.0.1", Some("shared (carrier-grade NAT)")),
            ("0.0.0.0", Some("unspecified")),
            ("::", Some("unspecified")),
            ("255.255.255.255", Some("reserved")),
            ("224.0.0.1", Some("multicast")),
            // IPv4 inside IPv6 is judged as IPv4
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("cloud metadata")),
            ("64:ff9b::a9fe:a9fe", Some("cloud metadata")),
            ("2002:0a00:0001::1", Some("private")),
            ("8.8.8.8", None),
            ("172.32.0.1", None),
            ("2606:4700::1111", None),
            ("::ffff:8.8.8.8", None),
        ];
        for (addr, kind) in cases {
            assert_eq!(special(ip(addr)), kind, "{addr}");
        }
    }

    #[test]
    fn names_are_matched_exactly_or_below_a_suffix_on_listed_ports() {
        let p = policy(
            Mode::Allow,
            &["api.openai.com", "*.example.org", "git.example.net:8443"],
        );
        let public = &["93.184.215.14"];
        let cases = [
            ("api.openai.com", 443, allow("api.openai.com", public)),
            ("API.OpenAI.com.", 80, allow("api.openai.com", public)),
            (
                "api.openai.com",
                22,
                refused("api.openai.com:22 is not listed"),
            ),
            (
                "evil-api.openai.com",
                443,
                refused("evil-api.openai.com:443 is not listed"),
            ),
            ("a.b.example.org", 443, allow("*.example.org", public)),
            ("example.org", 443, refused("example.org:443 is not listed")),
            (
                "badexample.org",
                443,
                refused("badexample.org:443 is not listed"),
            ),
            (
                "git.example.net",
                8443,
                allow("git.example.net:8443", public),
            ),
            (
                "git.example.net",
                443,
                refused("git.example.net:443 is not listed"),
            ),
        ];
        for (host, port, want) in cases {
            assert_eq!(decide(&p, host, port, public), want, "{host}:{port}");
        }
    }

    /// What Claude Code's Remote Control reaches from a box, read from Claude Code 2.1.197: its
    /// bridge (`POST /v1/environments/bridge`) and session ingress (`wss://<api>/v1/
    /// session_ingress/ws/<id>`, through the proxy) on the API host, and the sign-in it needs
    /// (a claude.ai login, its token refreshed at platform.claude.com). The shipped list
    /// admits them all, on 443.
    #[test]
    fn the_shipped_list_admits_claude_codes_remote_control() {
        let (entries, bad) = parse_list(include_str!("../../egress-allow.txt"));
        assert_eq!(bad, Vec::<String>::new());
        let p = Policy {
            mode: Mode::Allow,
            entries,
        };
        let public = &["160.79.104.10"];
        for host in ["api.anthropic.com", "platform.claude.com", "claude.ai"] {
            assert_eq!(
                decide(&p, host, 443, public),
                allow(host, public),
                "{host}:443"
            );
        }
    }

    #[test]
    fn a_listed_name_that_resolves_to_a_special_address_is_refused_unless_the_address_is_listed() {
        let p = policy(
            Mode::Allow,
            &["intranet.test", "meta.test", "10.9.0.0/16:443"],
        );
        assert_eq!(
            decide(&p, "intranet.test", 443, &["10.200.0.2"]),
            refused("intranet.test resolves to private address 10.200.0.2, which is not listed")
        );
        assert_eq!(
            decide(&p, "meta.test", 80, &["::ffff:169.254.169.254"]),
            refused(
                "meta.test resolves to cloud metadata address 169.254.169.254, which is not listed"
            )
        );
        // covered by the CIDR entry on its port only
        assert_eq!(
            decide(&p, "intranet.test", 443, &["10.9.1.1", "127.0.0.1"]),
            allow("intranet.test", &["10.9.1.1"])
        );
        assert_eq!(
            decide(&p, "intranet.test", 80, &["10.9.1.1"]),
            refused("intranet.test resolves to private address 10.9.1.1, which is not listed")
        );
        // public and special mixed: only the public ones are dialled
        assert_eq!(
            decide(
                &p,
                "intranet.test",
                443,
                &["127.0.0.1", "1.1.1.1", "::ffff:1.1.1.1"]
            ),
            allow("intranet.test", &["1.1.1.1"])
        );
        assert_eq!(
            decide(&p, "intranet.test", 443, &[]),
            refused("intranet.test does not resolve")
        );
    }

    #[test]
    fn addresses_need_an_ip_or_cidr_entry_special_or_not() {
        let p = policy(
            Mode::Allow,
            &[
                "10.200.0.1:8081",
                "192.168.0.0/16",
                "fd00::/8",
                "example.com",
            ],
        );
        let cases = [
            (
                "10.200.0.1",
                8081,
                allow("10.200.0.1:8081", &["10.200.0.1"]),
            ),
            (
                "10.200.0.1",
                8082,
                refused("private address 10.200.0.1:8082 is not listed"),
            ),
            (
                "10.200.0.2",
                8081,
                refused("private address 10.200.0.2:8081 is not listed"),
            ),
            (
                "::ffff:10.200.0.1",
                8081,
                allow("10.200.0.1:8081", &["10.200.0.1"]),
            ),
            (
                "192.168.7.7",
                443,
                allow("192.168.0.0/16", &["192.168.7.7"]),
            ),
            ("[fd00::7]", 80, allow("fd00::/8", &["fd00::7"])),
            (
                "127.0.0.1",
                443,
                refused("loopback address 127.0.0.1:443 is not listed"),
            ),
            (
                "[::1]",
                443,
                refused("loopback address ::1:443 is not listed"),
            ),
            (
                "169.254.169.254",
                80,
                refused("cloud metadata address 169.254.169.254:80 is not listed"),
            ),
            ("8.8.8.8", 443, refused("8.8.8.8:443 is not listed")),
        ];
        for (host, port, want) in cases {
            assert_eq!(decide(&p, host, port, &[]), want, "{host}:{port}");
        }
    }

    #[test]
    fn none_and_host_modes_refuse_in_the_proxy() {
        for mode in [Mode::None, Mode::Host] {
            let p = policy(mode, &["example.com", "10.0.0.0/8"]);
            assert_eq!(
                decide(&p, "example.com", 443, &["1.1.1.1"]),
                refused(&format!("network={mode}"))
            );
        }
    }

    #[test]
    fn the_box_environment_points_at_the_proxy() {
        let env = proxy_env();
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("http_proxy"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("NO_PROXY"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
    }

    #[test]
    fn a_host_header_matches_only_the_judged_host_and_port() {
        let cases = [
            ("example.com", "example.com", 80, true),
            ("Example.COM:80", "example.com", 80, true),
            ("example.com:8080", "example.com", 8080, true),
            ("example.com", "example.com", 8080, false),
            ("evil.example", "example.com", 80, false),
            ("example.com:81", "example.com", 80, false),
            ("[::1]:8080", "::1", 8080, true),
            ("[::1]", "::1", 80, true),
            ("10.0.0.1:x", "10.0.0.1", 80, false),
            ("example.com.evil", "example.com", 80, false),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(h, host, port, _)| (*h, host_header_matches(h, host, *port)))
            .collect();
        let want: Vec<_> = cases.iter().map(|(h, _, _, m)| (*h, *m)).collect();
        assert_eq!(got, want);
        // What goes out matches itself, and carries nothing but host and port.
        for (host, port, sent) in [
            ("example.com", 80, "example.com"),
            ("example.com", 8080, "example.com:8080"),
            ("::1", 80, "[::1]"),
            ("::1", 8443, "[::1]:8443"),
        ] {
            assert_eq!(host_header(host, port), sent);
            assert!(host_header_matches(sent, host, port), "{sent}");
        }
    }
}
