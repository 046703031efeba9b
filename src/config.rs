//! `$BOX_CONFIG_DIR/env` and `nodes`: parsing and validation.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::error::UserError;
use crate::plan::active;
use crate::plan::egress::Mode;
use crate::plan::globals::Role;
use crate::plan::notify;
use crate::plan::retention::Policy;
use crate::plan::unit::valid_memory_max;

pub(crate) const KNOWN_KEYS: &[&str] = &[
    "BOX_NODE",
    "BOX_GLOBALS_ROLE",
    "BOX_S3_ENDPOINT",
    "BOX_BUCKET",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "BOX_S3_REGION",
    "RESTIC_PASSWORD",
    "BOX_MEMORY_MAX",
    "BOX_LEASE_TTL",
    "BOX_RUNTIME",
    "BOX_STATE_DIR",
    "BOX_S3_UNSAFE_LEASES",
    "BOX_KEEP_LAST",
    "BOX_KEEP_DAILY",
    "BOX_KEEP_WEEKLY",
    "BOX_LOCK_WAIT",
    "BOX_PARK_WAIT",
    "BOX_NOTIFY",
    "BOX_NETWORK",
    "BOX_TASKS_MAX",
    "BOX_TMPFS_MAX",
    "BOX_SNAPSHOT_ADD_MAX",
    "BOX_QUICK_PARK",
    "BOX_SNAPSHOT_EVERY",
];

/// A box's default bound on its processes and threads: room for an agent, its language
/// servers and a build, not for a fork bomb that would starve the node.
pub(crate) const DEFAULT_TASKS_MAX: u64 = 4096;
/// A box's memory when neither its record nor `BOX_MEMORY_MAX` say: one box running away
/// leaves the node (sshd, ag-box, the other boxes) a quarter. `infinity` lifts it.
pub(crate) const DEFAULT_MEMORY_MAX: &str = "75%";
/// A box's `/tmp` and HOME each hold at most this (they are memory): room for builds and caches.
pub(crate) const DEFAULT_TMPFS_MAX: u64 = 2 << 30;
/// Fewer would not start a shell and an agent.
const MIN_TASKS_MAX: u64 = 32;

/// A value that must never reach argv or a log line.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuntimeChoice {
    Auto,
    Systemd,
    Direct,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEntry {
    pub name: String,
    /// None for the `local` line.
    pub ssh_alias: Option<String>,
}

/// Records and snapshots in an S3 bucket (multi-node).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct S3Config {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    /// The operator accepts leases on an endpoint that ignores conditional writes.
    pub unsafe_leases: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub node: String,
    pub globals_role: Option<Role>,
    pub s3: Option<S3Config>,
    pub state_dir: PathBuf,
    pub home: PathBuf,
    pub restic_password: Option<Secret>,
    pub memory_max: Option<String>,
    pub lease_ttl: Duration,
    /// How often the timer takes a snapshot of each active box (`BOX_SNAPSHOT_EVERY`).
    pub snapshot_every: Duration,
    /// How long a command waits for another one on the same box on this node.
    pub lock_wait: Duration,
    /// How long `park` (and `rollback` of a running box) wait for the agent's turn to end.
    pub park_wait: Duration,
    /// Where a box's agent state changes are pushed (`BOX_NOTIFY`).
    pub notify: Option<notify::Target>,
    /// Processes and threads one box may have at once (its unit's `TasksMax`, and `RLIMIT_NPROC`
    /// of its own uid).
    pub tasks_max: u64,
    /// Bytes each of a box's memory-backed dirs (`/tmp`, HOME) may hold.
    pub tmpfs_max: u64,
    /// Bytes of changed files one snapshot of a box may read in (`BOX_SNAPSHOT_ADD_MAX`); None:
    /// no bound.
    pub snapshot_add_max: Option<u64>,
    /// A park saves only what changed and the whole snapshot follows (`BOX_QUICK_PARK`, on
    /// unless `false`): off while a node of the cluster runs an ag-box before it, which refuses
    /// a record whose latest is such changes.
    pub quick_park: bool,
    pub retention: Policy,
    pub runtime: RuntimeChoice,
    pub nodes: Vec<NodeEntry>,
    /// `network=` of boxes whose record names none (new boxes get it at `track`).
    pub network: Mode,
}

/// Where the env and nodes files are: `$BOX_CONFIG_DIR`, else `~/.config/box`.
pub(crate) fn config_dir(home: &Path) -> PathBuf {
    std::env::var_os("BOX_CONFIG_DIR").map_or_else(|| home.join(".config/box"), PathBuf::from)
}

/// `KEY=VALUE` lines; `#` comments, blank lines, an optional `export ` and quotes allowed.
pub(crate) fn parse_env(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected KEY=VALUE", i + 1));
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("line {}: invalid key '{key}'", i + 1));
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        out.insert(key.to_string(), unquoted.to_string());
    }
    Ok(out)
}

/// `<node> <ssh-alias|local>` lines.
pub(crate) fn parse_nodes(text: &str) -> Result<Vec<NodeEntry>, String> {
    let mut out: Vec<NodeEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, target] = fields[..] else {
            return Err(format!(
                "line {}: expected '<node> <ssh-alias|local>'",
                i + 1
            ));
        };
        if out.iter().any(|n| n.name == name) {
            return Err(format!("line {}: node '{name}' listed twice", i + 1));
        }
        out.push(NodeEntry {
            name: name.to_string(),
            ssh_alias: (target != "local").then(|| target.to_string()),
        });
    }
    Ok(out)
}

/// Values from the file, overridden by the process environment.
pub(crate) struct Sources {
    pub file: BTreeMap<String, String>,
    pub process: BTreeMap<String, String>,
    pub nodes: Vec<NodeEntry>,
    pub home: PathBuf,
    pub hostname: String,
}

impl Sources {
    fn get(&self, key: &str) -> Option<&str> {
        self.process
            .get(key)
            .or_else(|| self.file.get(key))
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

fn bad_key(key: &str, value: &str, hint: &str) -> UserError {
    UserError::usage(format!("config key {key}='{value}' is invalid"), hint)
}

impl Config {
    /// The nodes file's entry for `node` when this node reaches it (it has an ssh alias).
    pub(crate) fn reachable(&self, node: &str) -> Option<&NodeEntry> {
        self.nodes
            .iter()
            .find(|n| n.name == node && n.ssh_alias.is_some())
    }

    // One key after another, as docs/reference.md lists them.
    #[allow(clippy::too_many_lines)]
    pub(crate) fn from_sources(src: &Sources) -> Result<Config, UserError> {
        let runtime = match src.get("BOX_RUNTIME").unwrap_or("auto") {
            "auto" => RuntimeChoice::Auto,
            "systemd" => RuntimeChoice::Systemd,
            "direct" => RuntimeChoice::Direct,
            other => return Err(bad_key("BOX_RUNTIME", other, "use auto, systemd or direct")),
        };
        let lease_ttl = match src.get("BOX_LEASE_TTL") {
            None => Duration::from_hours(3),
            Some(v) => humantime::parse_duration(v)
                .map_err(|_| bad_key("BOX_LEASE_TTL", v, "use a duration such as 3h or 90m"))?,
        };
        let snapshot_every = match src.get("BOX_SNAPSHOT_EVERY") {
            None => Duration::from_mins(15),
            Some(v) => humantime::parse_duration(v)
                .ok()
                .filter(|d| *d >= active::TIMER_EVERY && *d <= lease_ttl / 2)
                .ok_or_else(|| {
                    bad_key(
                        "BOX_SNAPSHOT_EVERY",
                        v,
                        &format!(
                            "use a duration from 5m to half of BOX_LEASE_TTL ({}), such as 15m",
                            humantime::format_duration(lease_ttl / 2)
                        ),
                    )
                })?,
        };
        let lock_wait = match src.get("BOX_LOCK_WAIT") {
            None => Duration::from_mins(2),
            Some(v) => humantime::parse_duration(v)
                .map_err(|_| bad_key("BOX_LOCK_WAIT", v, "use a duration such as 2m or 30s"))?,
        };
        let park_wait = match src.get("BOX_PARK_WAIT") {
            None => Duration::from_mins(2),
            Some(v) => humantime::parse_duration(v)
                .map_err(|_| bad_key("BOX_PARK_WAIT", v, "use a duration such as 2m or 30s"))?,
        };
        let notify = src
            .get("BOX_NOTIFY")
            .filter(|v| !v.is_empty())
            // Not echoed: a webhook's URL may hold its token.
            .map(|v| {
                notify::parse(v).map_err(|hint| {
                    UserError::usage(
                        "config key BOX_NOTIFY is invalid (its value not shown)",
                        hint,
                    )
                })
            })
            .transpose()?;
        let tasks_max = match src.get("BOX_TASKS_MAX") {
            None => DEFAULT_TASKS_MAX,
            Some(v) => v
                .parse()
                .ok()
                .filter(|n| *n >= MIN_TASKS_MAX)
                .ok_or_else(|| {
                    bad_key(
                        "BOX_TASKS_MAX",
                        v,
                        &format!(
                            "use a number of {MIN_TASKS_MAX} or more, e.g. {DEFAULT_TASKS_MAX}"
                        ),
                    )
                })?,
        };
        let tmpfs_max = match src.get("BOX_TMPFS_MAX") {
            None => DEFAULT_TMPFS_MAX,
            Some(v) => crate::plan::unit::memory_max_bytes(v)
                .filter(|n| *n >= 1 << 20)
                .ok_or_else(|| bad_key("BOX_TMPFS_MAX", v, "use a size of 1M or more, e.g. 2G"))?,
        };
        let snapshot_add_max = match src.get("BOX_SNAPSHOT_ADD_MAX") {
            None | Some("infinity") => None,
            Some(v) => Some(
                crate::plan::unit::memory_max_bytes(v)
                    .filter(|n| *n >= 1 << 20)
                    .ok_or_else(|| {
                        bad_key(
                            "BOX_SNAPSHOT_ADD_MAX",
                            v,
                            "use a size of 1M or more (e.g. 20G), or infinity",
                        )
                    })?,
            ),
        };
        let quick_park = match src.get("BOX_QUICK_PARK") {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => return Err(bad_key("BOX_QUICK_PARK", v, "use true or false")),
        };
        let memory_max = Some(
            src.get("BOX_MEMORY_MAX")
                .unwrap_or(DEFAULT_MEMORY_MAX)
                .to_string(),
        )
        .filter(|m| m != "infinity");
        if let Some(m) = &memory_max
            && !valid_memory_max(m)
        {
            return Err(bad_key(
                "BOX_MEMORY_MAX",
                m,
                "use bytes with an optional K/M/G/T suffix (e.g. 1500M), a percentage, or infinity",
            ));
        }
        let node = src.get("BOX_NODE").unwrap_or(&src.hostname).to_string();
        if node.is_empty() || node.contains(char::is_whitespace) {
            return Err(bad_key(
                "BOX_NODE",
                &node,
                "set BOX_NODE to a name without spaces",
            ));
        }
        let s3 = match src.get("BOX_S3_ENDPOINT") {
            None => None,
            Some(endpoint) => {
                let need = |key: &str| {
                    src.get(key).map(str::to_string).ok_or_else(|| {
                        UserError::usage(
                            format!("config key {key} is missing (BOX_S3_ENDPOINT is set)"),
                            format!("add {key}=... to the env file; see env.example"),
                        )
                    })
                };
                if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
                    return Err(bad_key(
                        "BOX_S3_ENDPOINT",
                        endpoint,
                        "use https://<account-id>.r2.cloudflarestorage.com",
                    ));
                }
                need("RESTIC_PASSWORD")?;
                Some(S3Config {
                    endpoint: endpoint.trim_end_matches('/').to_string(),
                    bucket: need("BOX_BUCKET")?,
                    region: src.get("BOX_S3_REGION").unwrap_or("auto").to_string(),
                    access_key_id: Secret(need("AWS_ACCESS_KEY_ID")?),
                    secret_access_key: Secret(need("AWS_SECRET_ACCESS_KEY")?),
                    unsafe_leases: src.get("BOX_S3_UNSAFE_LEASES") == Some("1"),
                })
            }
        };
        let keep = |key: &str, default: usize| match src.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| bad_key(key, v, "use a whole number (0 keeps none by that rule)")),
        };
        let retention = Policy {
            last: keep("BOX_KEEP_LAST", Policy::DEFAULT.last)?,
            daily: keep("BOX_KEEP_DAILY", Policy::DEFAULT.daily)?,
            weekly: keep("BOX_KEEP_WEEKLY", Policy::DEFAULT.weekly)?,
        };
        let globals_role = match src.get("BOX_GLOBALS_ROLE") {
            None => None,
            Some(v) => Some(Role::parse(v).ok_or_else(|| {
                bad_key(
                    "BOX_GLOBALS_ROLE",
                    v,
                    "use push on one node and pull on the others",
                )
            })?),
        };
        let network = match src.get("BOX_NETWORK") {
            None => Mode::Allow,
            Some(v) => Mode::parse(v)
                .ok_or_else(|| bad_key("BOX_NETWORK", v, "use allow, none or host"))?,
        };
        Ok(Config {
            node,
            globals_role,
            s3,
            state_dir: PathBuf::from(src.get("BOX_STATE_DIR").unwrap_or("/var/lib/ag-box")),
            home: src.home.clone(),
            restic_password: src.get("RESTIC_PASSWORD").map(|p| Secret(p.to_string())),
            memory_max,
            lease_ttl,
            snapshot_every,
            lock_wait,
            park_wait,
            notify,
            tasks_max,
            tmpfs_max,
            snapshot_add_max,
            quick_park,
            retention,
            runtime,
            nodes: src.nodes.clone(),
            network,
        })
    }

    /// Read the config dir and the process environment.
    pub(crate) fn load() -> Result<Config> {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
        let config_dir = config_dir(&home);
        let file = read_env_file(&config_dir.join("env"))?;
        for key in file.keys().filter(|k| !KNOWN_KEYS.contains(&k.as_str())) {
            tracing::warn!("unknown key {key} in {}", config_dir.join("env").display());
        }
        let nodes_path = config_dir.join("nodes");
        let nodes = match fs::read_to_string(&nodes_path) {
            Ok(text) => parse_nodes(&text).map_err(|e| {
                UserError::usage(
                    format!("nodes file {}: {e}", nodes_path.display()),
                    "see nodes.example",
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(e).with_context(|| format!("reading {}", nodes_path.display())),
        };
        let process = KNOWN_KEYS
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into());
        let sources = Sources {
            file,
            process,
            nodes,
            home,
            hostname,
        };
        Ok(Config::from_sources(&sources)?)
    }
}

fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(UserError::usage(
            format!(
                "env file {} is readable by group/others (mode {:o}) and holds secrets",
                path.display(),
                meta.permissions().mode() & 0o777
            ),
            format!("run 'chmod 600 {}'", path.display()),
        )
        .into());
    }
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_env(&text).map_err(|e| {
        UserError::usage(
            format!("env file {}: {e}", path.display()),
            "see env.example",
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn sources(file: &[(&str, &str)], process: &[(&str, &str)]) -> Sources {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Sources {
            file: map(file),
            process: map(process),
            nodes: vec![],
            home: "/root".into(),
            hostname: "host1".into(),
        }
    }

    #[test]
    fn env_file_syntax() {
        let text = "# comment\n\nBOX_NODE=node-a\nexport RESTIC_PASSWORD=\"s3cr=t\"\nBOX_MEMORY_MAX='1500M'\n  BOX_LEASE_TTL = 2h \n";
        let got = parse_env(text).unwrap();
        let want: BTreeMap<String, String> = [
            ("BOX_NODE", "node-a"),
            ("RESTIC_PASSWORD", "s3cr=t"),
            ("BOX_MEMORY_MAX", "1500M"),
            ("BOX_LEASE_TTL", "2h"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
        assert_eq!(
            parse_env("JUSTAWORD\n"),
            Err("line 1: expected KEY=VALUE".into())
        );
        assert_eq!(
            parse_env("A B=1\n"),
            Err("line 1: invalid key 'A B'".into())
        );
    }

    #[test]
    fn nodes_file_syntax() {
        let got =
            parse_nodes("# cluster\nnode-a local\nnode-b  my-b   # the other one\n\n").unwrap();
        assert_eq!(
            got,
            vec![
                NodeEntry {
                    name: "node-a".into(),
                    ssh_alias: None
                },
                NodeEntry {
                    name: "node-b".into(),
                    ssh_alias: Some("my-b".into())
                },
            ]
        );
        assert!(parse_nodes("a\n").is_err());
        assert!(parse_nodes("a local\na x\n").unwrap_err().contains("twice"));
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::from_sources(&sources(
            &[("BOX_MEMORY_MAX", "2G"), ("BOX_RUNTIME", "systemd")],
            &[("BOX_RUNTIME", "direct")],
        ))
        .unwrap();
        assert_eq!(
            c,
            Config {
                node: "host1".into(),
                globals_role: None,
                s3: None,
                state_dir: "/var/lib/ag-box".into(),
                home: "/root".into(),
                restic_password: None,
                memory_max: Some("2G".into()),
                lease_ttl: Duration::from_hours(3),
                snapshot_every: Duration::from_mins(15),
                lock_wait: Duration::from_mins(2),
                park_wait: Duration::from_mins(2),
                notify: None,
                tasks_max: 4096,
                tmpfs_max: 2 << 30,
                snapshot_add_max: None,
                quick_park: true,
                retention: Policy::DEFAULT,
                runtime: RuntimeChoice::Direct,
                nodes: vec![],
                network: Mode::Allow,
            }
        );
    }

    #[test]
    fn invalid_values_name_the_key() {
        for (k, v) in [
            ("BOX_RUNTIME", "docker"),
            ("BOX_LEASE_TTL", "soon"),
            ("BOX_MEMORY_MAX", "lots"),
            ("BOX_NETWORK", "open"),
            ("BOX_TASKS_MAX", "10"),
            ("BOX_TASKS_MAX", "lots"),
            ("BOX_TMPFS_MAX", "10K"),
            ("BOX_TMPFS_MAX", "big"),
            ("BOX_SNAPSHOT_ADD_MAX", "10K"),
            ("BOX_SNAPSHOT_ADD_MAX", "none"),
            ("BOX_PARK_WAIT", "a while"),
            ("BOX_SNAPSHOT_EVERY", "1m"),
            ("BOX_SNAPSHOT_EVERY", "2h"),
            ("BOX_SNAPSHOT_EVERY", "often"),
            ("BOX_NOTIFY", "tell-me"),
            ("BOX_NOTIFY", "ntfy:my-topic"),
        ] {
            let e = Config::from_sources(&sources(&[(k, v)], &[])).unwrap_err();
            assert!(e.to_string().starts_with(&format!("config key {k}")), "{e}");
            // A webhook's URL may hold its token: never echoed.
            if k == "BOX_NOTIFY" {
                assert!(!e.to_string().contains(v), "{e}");
            }
        }
    }

    #[test]
    fn s3_needs_its_keys() {
        let full = [
            ("BOX_S3_ENDPOINT", "https://acc.r2.cloudflarestorage.com/"),
            ("BOX_BUCKET", "agent-boxes"),
            ("AWS_ACCESS_KEY_ID", "ak"),
            ("AWS_SECRET_ACCESS_KEY", "sk"),
            ("RESTIC_PASSWORD", "pw"),
        ];
        let c = Config::from_sources(&sources(&full, &[])).unwrap();
        assert_eq!(
            c.s3,
            Some(S3Config {
                endpoint: "https://acc.r2.cloudflarestorage.com".into(),
                bucket: "agent-boxes".into(),
                region: "auto".into(),
                access_key_id: Secret("ak".into()),
                secret_access_key: Secret("sk".into()),
                unsafe_leases: false,
            })
        );
        for missing in [
            "BOX_BUCKET",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "RESTIC_PASSWORD",
        ] {
            let partial: Vec<(&str, &str)> = full
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let e = Config::from_sources(&sources(&partial, &[])).unwrap_err();
            assert_eq!(
                e.message,
                format!("config key {missing} is missing (BOX_S3_ENDPOINT is set)")
            );
        }
    }

    #[test]
    fn secrets_do_not_print() {
        let c = Config::from_sources(&sources(&[("RESTIC_PASSWORD", "hunter2")], &[])).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn world_readable_env_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("env");
        fs::write(&path, "BOX_NODE=a\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_env_file(&path).unwrap_err().to_string();
        assert!(
            e.contains("readable by group/others") && e.contains("chmod 600"),
            "{e}"
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read_env_file(&path)
                .unwrap()
                .get("BOX_NODE")
                .map(String::as_str),
            Some("a")
        );
    }
}
