//! `port`: what listens in a box (its namespace's `/proc/net/tcp` and `tcp6`), and the ssh
//! argv that brings a port of a box on another node here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// `ss`'s LISTEN state in `/proc/net/tcp`.
const LISTEN: &str = "0A";

/// The TCP ports listening in `/proc/net/tcp` (`tcp`) and `tcp6` text, by address, sorted.
pub(crate) fn listening(tcp: &str, tcp6: &str) -> Vec<(IpAddr, u16)> {
    let mut out: Vec<(IpAddr, u16)> = tcp
        .lines()
        .chain(tcp6.lines())
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            if state != LISTEN {
                return None;
            }
            let (addr, port) = local.split_once(':')?;
            Some((address(addr)?, u16::from_str_radix(port, 16).ok()?))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// An address as `/proc/net/tcp` writes it: 32-bit words in the host's (little-endian) order.
fn address(hex: &str) -> Option<IpAddr> {
    let words: Option<Vec<u32>> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect();
    match (hex.len(), words?.as_slice()) {
        (8, [w]) => Some(IpAddr::V4(Ipv4Addr::from(w.swap_bytes()))),
        (32, [a, b, c, d]) => {
            let bytes: Vec<u8> = [a, b, c, d].iter().flat_map(|w| w.to_le_bytes()).collect();
            let octets: [u8; 16] = bytes.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(octets)))
        }
        _ => None,
    }
}

/// An address as a host part of `host:port` (an IPv6 one in brackets).
pub(crate) fn address_shown(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

/// `ssh` to `alias` that serves the box's `port` on a Unix socket `sock` there (root's alone,
/// gone when ssh ends: the remote `port` ends with its stdin) and forwards `bind:local` here to
/// it.
pub(crate) fn forward_argv(
    alias: &str,
    bind: IpAddr,
    local: u16,
    sock: &Path,
    name: &str,
    port: u16,
) -> Vec<String> {
    let bind = address_shown(bind);
    vec![
        "ssh".into(),
        "-T".into(),
        "-o".into(),
        "ConnectTimeout=10".into(),
        "-o".into(),
        "ExitOnForwardFailure=yes".into(),
        "-L".into(),
        format!("{bind}:{local}:{}", sock.display()),
        alias.into(),
        "--".into(),
        format!(
            "ag-box port {name} {port} --serve-unix {} --while-stdin",
            sock.display()
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn listening_ports_are_read_from_both_tables() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  2000     0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0C38 0100007F:9C2E 01 00000000:00000000 00:00000000 00000000  2000     0 2 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  2000     0 3 1 0000000000000000 100 0 0 10 0
";
        let tcp6 = "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000
";
        assert_eq!(
            listening(tcp, tcp6),
            vec![
                (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 80),
                (IpAddr::V4(Ipv4Addr::LOCALHOST), 8000),
                (IpAddr::V6(Ipv6Addr::LOCALHOST), 8080),
            ]
        );
        assert_eq!(listening("", "garbage line\n"), vec![]);
    }

    #[test]
    fn a_remote_port_comes_through_one_ssh() {
        assert_eq!(
            forward_argv(
                "node-b",
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                3000,
                Path::new("/run/ag-box-ports/web.8000.77.sock"),
                "web",
                8000
            ),
            [
                "ssh",
                "-T",
                "-o",
                "ConnectTimeout=10",
                "-o",
                "ExitOnForwardFailure=yes",
                "-L",
                "127.0.0.1:3000:/run/ag-box-ports/web.8000.77.sock",
                "node-b",
                "--",
                "ag-box port web 8000 --serve-unix /run/ag-box-ports/web.8000.77.sock --while-stdin"
            ]
        );
        assert_eq!(
            forward_argv(
                "b",
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                1,
                Path::new("/s"),
                "x",
                2
            )[7],
            "[::1]:1:/s"
        );
    }
}
