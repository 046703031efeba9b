//! `doctor`'s verdicts: each check's facts in, one line out (ok, warn or fail, and for anything
//! not ok the exact fix). The facts are gathered by `commands::doctor`.

use std::time::{Duration, SystemTime};

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    // The key `doctor --json` prints (docs/json-shapes.json).
    #[allow(clippy::struct_field_names)]
    pub check: String,
    pub status: Status,
    pub detail: String,
    /// null when the check passed.
    pub fix: Option<String>,
}

pub(crate) fn ok(check: &str, detail: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        status: Status::Ok,
        detail: detail.into(),
        fix: None,
    }
}

pub(crate) fn warn(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        status: Status::Warn,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

pub(crate) fn fail(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        status: Status::Fail,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

/// restic's own age for a stale lock.
const STALE_LOCK: Duration = Duration::from_mins(30);

/// A lock of the repository as `restic cat lock` shows it; `alive`: its process may still run
/// (another host's, or this host's and still there).
pub(crate) struct Lock {
    /// The repository's dir (`restic`, `restic-changes`).
    pub repository: &'static str,
    pub time: String,
    pub taken: Option<SystemTime>,
    pub hostname: String,
    pub pid: i64,
    pub alive: bool,
}

/// Stale locks (restic's judgement: older than 30 minutes, or of a process gone from this host)
/// stop prune and check until removed.
pub(crate) fn locks(locks: &[Lock], now: SystemTime) -> Check {
    let stale: Vec<String> = locks
        .iter()
        .filter(|l| {
            let old = l
                .taken
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > STALE_LOCK);
            old || !l.alive
        })
        .map(|l| {
            format!(
                "{} pid {} since {} in {}",
                l.hostname, l.pid, l.time, l.repository
            )
        })
        .collect();
    if stale.is_empty() {
        ok(
            "repository locks",
            format!("{} lock(s), none stale", locks.len()),
        )
    } else {
        fail(
            "repository locks",
            format!("stale: {}", stale.join("; ")),
            "run 'ag-box doctor --unlock' (removes stale locks only)",
        )
    }
}

/// The first `a.b` (or `a.b.c`) in a `--version` line, e.g. `tmux 3.3a` -> (3, 3).
pub(crate) fn version_of(text: &str) -> Option<(u32, u32)> {
    text.split(|c: char| !c.is_ascii_digit() && c != '.')
        .find_map(|w| {
            let mut parts = w.split('.').filter(|p| !p.is_empty());
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
}

/// A tool ag-box runs: missing, older than `min`, or fine.
pub(crate) fn tool(name: &str, version_line: Option<&str>, min: Option<(u32, u32)>) -> Check {
    let check = format!("tool {name}");
    let Some(line) = version_line else {
        return fail(
            &check,
            format!("{name} is not installed (or not on PATH)"),
            "run install.sh (on Debian it apt-gets the tools), or install it by hand",
        );
    };
    let line = line.trim();
    match (min, version_of(line)) {
        (Some(min), Some(v)) if v < min => fail(
            &check,
            format!("{line}: older than the {}.{} ag-box needs", min.0, min.1),
            format!("upgrade {name} to {}.{} or newer", min.0, min.1),
        ),
        _ => ok(&check, line.to_string()),
    }
}

/// A config file holding secrets (the env file) or naming hosts (the nodes file): owned by the
/// user running ag-box, and writable by nobody else; the env file readable by nobody else.
pub(crate) fn config_file(path: &str, owner: u32, mode: u32, me: u32, secret: bool) -> Check {
    let check = format!("file {path}");
    let loose = if secret { 0o077 } else { 0o022 };
    let want = if secret { "600" } else { "644" };
    if owner != me {
        fail(
            &check,
            format!("owned by uid {owner}, not by the user running ag-box (uid {me})"),
            format!("chown {me} {path}"),
        )
    } else if mode & loose != 0 {
        fail(
            &check,
            format!(
                "mode {:o}: {} by other users",
                mode & 0o777,
                if secret { "readable" } else { "writable" }
            ),
            format!("chmod {want} {path}"),
        )
    } else {
        ok(&check, format!("mode {:o}", mode & 0o777))
    }
}

/// Leases expire by the clock: a node whose clock is off from the store's takes or keeps
/// leases at the wrong time.
pub(crate) fn clock(skew_secs: i64, lease_ttl_secs: u64) -> Check {
    let off = skew_secs.unsigned_abs();
    let detail = format!("this node's clock is {skew_secs:+} s from the store's");
    let fix = "run a time service (systemd-timesyncd, chrony) on every node";
    if off >= lease_ttl_secs / 10 && off > 60 {
        fail("clock", detail, fix)
    } else if off > 5 {
        warn("clock", detail, fix)
    } else {
        ok("clock", detail)
    }
}

/// Room for a restore's staging copy beside the projects.
pub(crate) fn free_space(path: &str, free: u64, total: u64) -> Check {
    const GIB: u64 = 1 << 30;
    // To one decimal, for the operator.
    #[allow(clippy::cast_precision_loss)]
    let detail = format!(
        "{:.1} GiB free of {:.1} GiB on the filesystem of {path}",
        free as f64 / GIB as f64,
        total as f64 / GIB as f64
    );
    let fix = format!(
        "free space on the filesystem of {path}: a restore needs room for a staging copy of the box"
    );
    if free < GIB {
        fail("free space", detail, fix)
    } else if free < 5 * GIB || free * 10 < total {
        warn("free space", detail, fix)
    } else {
        ok("free space", detail)
    }
}

/// The same ag-box everywhere (a record written by a newer one may not be read by an older).
pub(crate) fn peer(node: &str, answer: Result<&str, &str>, mine: &str) -> Check {
    let check = format!("node {node}");
    match answer {
        Err(why) => fail(
            &check,
            format!("not reachable over ssh without a prompt: {why}"),
            format!(
                "check the nodes file's ssh alias for {node}, its key (ssh-copy-id) and known_hosts, then 'ssh -o BatchMode=yes <alias> true'"
            ),
        ),
        Ok(theirs) if theirs.trim() != mine => fail(
            &check,
            format!("runs {} but this node runs {mine}", theirs.trim()),
            "install the same ag-box on every node ('install.sh --to <alias>' from one source tree)",
        ),
        Ok(_) => ok(&check, format!("reachable over ssh, {mine}")),
    }
}

/// Each agent CLI's `--version` line (None: not installed).
pub(crate) type AgentVersions = Vec<(String, Option<String>)>;

/// Agent CLIs here against other nodes': a session resumed with another version may not load.
pub(crate) fn agents(here: &AgentVersions, others: &[(String, AgentVersions)]) -> Check {
    let installed: Vec<String> = here
        .iter()
        .filter_map(|(cli, v)| v.as_ref().map(|v| format!("{cli} {}", v.trim())))
        .collect();
    let mut differ = Vec::new();
    for (node, theirs) in others {
        for (cli, v) in theirs {
            let mine = here
                .iter()
                .find(|(c, _)| c == cli)
                .and_then(|(_, v)| v.as_deref());
            if mine.map(str::trim) != v.as_deref().map(str::trim) {
                differ.push(format!(
                    "{cli}: {} here, {} on {node}",
                    mine.map_or("none", str::trim),
                    v.as_deref().map_or("none", str::trim)
                ));
            }
        }
    }
    if installed.is_empty() {
        return warn(
            "agent CLIs",
            "none installed here: a box on this node has no agent to run",
            "install one (e.g. 'npm install -g @anthropic-ai/claude-code'), the same version on every node",
        );
    }
    let detail = installed.join(", ");
    if differ.is_empty() {
        ok("agent CLIs", detail)
    } else {
        warn(
            "agent CLIs",
            format!("{detail}; differ: {}", differ.join("; ")),
            "install the same agent CLI versions on every node, so a resumed session loads",
        )
    }
}

/// The GPU device nodes a `gpu=true` box gets here.
pub(crate) fn gpus(devices: &[std::path::PathBuf]) -> Check {
    const CHECK: &str = "GPUs";
    if devices.is_empty() {
        return ok(CHECK, "none here ('gpu=true' boxes get no device)");
    }
    let shown: Vec<String> = devices.iter().map(|d| d.display().to_string()).collect();
    ok(
        CHECK,
        format!("{} (bound into 'gpu=true' boxes)", shown.join(", ")),
    )
}

/// The node's CA for the credential broker, as found in `dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CaFound {
    /// Not made yet (the first start of a box that needs it makes it).
    Absent,
    /// Made for the hosts of this version's rules, its key root's alone.
    Ready,
    /// Made for other hosts (an older ag-box): made anew at the next start that needs it.
    OtherHosts,
    /// Its key is readable by others than root (the mode's group and other bits).
    KeyOpen(u32),
}

pub(crate) fn broker_ca(dir: &str, found: CaFound, system_bundle: bool) -> Check {
    const CHECK: &str = "credential broker CA";
    let bundle = if system_bundle {
        String::new()
    } else {
        format!(
            "; no {} here, so only clients that read SSL_CERT_FILE and the like trust it",
            super::sandbox::SYSTEM_CA_BUNDLE
        )
    };
    match found {
        CaFound::KeyOpen(mode) => fail(
            CHECK,
            format!(
                "{dir}/ca-key.pem is readable by others (mode {mode:03o}): boxes refuse to start"
            ),
            format!("rm -r {dir} (the next box start makes a new CA)"),
        ),
        _ if !bundle.is_empty() => warn(
            CHECK,
            format!("{dir}{bundle}"),
            "install the ca-certificates package",
        ),
        CaFound::Absent => ok(
            CHECK,
            format!("{dir}: not made yet (the first start of a box given gh makes it)"),
        ),
        CaFound::Ready => ok(CHECK, format!("{dir}: ready, key root's alone")),
        CaFound::OtherHosts => ok(
            CHECK,
            format!("{dir}: made for other hosts; the next box start makes it anew"),
        ),
    }
}

/// What the store holds of an OAuth login the broker keeps, as this node finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredFound {
    /// The node's store serves it alone (local): nothing kept there.
    NotShared,
    Absent,
    /// Sealed there, and it opens with this node's password: when it expires, who refreshed it.
    Opens {
        expires: String,
        by: String,
    },
    /// Sealed there, and it does not open here.
    Sealed(String),
    Unreadable(String),
}

/// The broker's OAuth login `login` (its node file's access token expiry, if it holds one; or
/// why it cannot be read) and the store's copy of it.
pub(crate) fn oauth_login(
    login: &str,
    on_node: &Result<Option<String>, String>,
    stored: &StoredFound,
) -> Check {
    let check = format!("{login} login");
    let here = match on_node {
        Ok(Some(expires)) => {
            format!("this node's access token expires {expires} (the broker refreshes it when due)")
        }
        Ok(None) => "none on this node".to_string(),
        Err(why) => {
            return warn(
                &check,
                format!("this node's file cannot be read: {why}"),
                "log in again on the node",
            );
        }
    };
    match stored {
        StoredFound::Sealed(why) => fail(
            &check,
            format!(
                "{here}; the store's copy does not open with this node's RESTIC_PASSWORD ({why}): the nodes cannot share its refreshes"
            ),
            "give every node the same RESTIC_PASSWORD",
        ),
        StoredFound::Unreadable(why) => warn(
            &check,
            format!("{here}; the store's copy cannot be read: {why}"),
            "check the store with 'ag-box doctor' on another node",
        ),
        StoredFound::Opens { expires, by } => ok(
            &check,
            format!("{here}; the store's copy, refreshed by {by}, expires {expires}"),
        ),
        StoredFound::Absent if on_node.as_ref().is_ok_and(Option::is_some) => ok(
            &check,
            format!("{here}; none in the store yet (the first refresh leaves it there)"),
        ),
        StoredFound::Absent | StoredFound::NotShared => ok(&check, here),
    }
}

/// A refresh of the broker's OAuth login `login` cut short after its token endpoint answered
/// left that answer in `journal` (Ok: it reads): the login's next refresh finishes it; one
/// that cannot be read stops the login's refreshes until it can. None when there is none.
pub(crate) fn cut_short_refresh(
    login: &str,
    journal: &str,
    found: Option<Result<(), String>>,
) -> Option<Check> {
    let check = format!("{login} refresh");
    Some(match found? {
        Ok(()) => warn(
            &check,
            format!("a refresh cut short earlier left the newest login in {journal}"),
            "nothing to do: the login's next refresh finishes it (a box given it, or 'ag-box globals push')",
        ),
        Err(why) => fail(
            &check,
            format!(
                "{journal}, the newest login a cut-short refresh left, cannot be read ({why}): the login is not refreshed until it can"
            ),
            "make it readable by root again (it holds the newest tokens; moving it aside loses them)",
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_cut_short_refresh_is_said_and_an_unreadable_one_fails() {
        assert_eq!(cut_short_refresh("claude-oauth", "/j", None), None);
        let pending = cut_short_refresh("claude-oauth", "/j", Some(Ok(()))).unwrap();
        assert_eq!(
            (pending.status, pending.detail.as_str()),
            (
                Status::Warn,
                "a refresh cut short earlier left the newest login in /j"
            )
        );
        let stuck = cut_short_refresh("claude-oauth", "/j", Some(Err("denied".into()))).unwrap();
        assert_eq!(
            (stuck.status, stuck.detail.as_str()),
            (
                Status::Fail,
                "/j, the newest login a cut-short refresh left, cannot be read (denied): the login is not refreshed until it can"
            )
        );
    }

    #[test]
    fn an_oauth_login_that_does_not_open_in_the_store_fails() {
        let at = "2026-12-04T10:00:00Z".to_string();
        assert_eq!(
            oauth_login(
                "claude-oauth",
                &Ok(Some(at.clone())),
                &StoredFound::Opens {
                    expires: at.clone(),
                    by: "nodeB".into()
                }
            ),
            ok(
                "claude-oauth login",
                format!(
                    "this node's access token expires {at} (the broker refreshes it when due); the store's copy, refreshed by nodeB, expires {at}"
                )
            )
        );
        assert_eq!(
            oauth_login("claude-oauth", &Ok(None), &StoredFound::NotShared),
            ok("claude-oauth login", "none on this node")
        );
        assert_eq!(
            oauth_login("claude-oauth", &Ok(Some(at.clone())), &StoredFound::Absent).detail,
            format!(
                "this node's access token expires {at} (the broker refreshes it when due); none in the store yet (the first refresh leaves it there)"
            )
        );
        assert_eq!(
            oauth_login(
                "claude-oauth",
                &Ok(None),
                &StoredFound::Sealed("bad tag".into())
            ),
            fail(
                "claude-oauth login",
                "none on this node; the store's copy does not open with this node's RESTIC_PASSWORD (bad tag): the nodes cannot share its refreshes",
                "give every node the same RESTIC_PASSWORD"
            )
        );
        assert_eq!(
            oauth_login(
                "claude-oauth",
                &Err("not a file".into()),
                &StoredFound::Absent
            )
            .status,
            Status::Warn
        );
    }

    #[test]
    fn versions_from_version_lines() {
        assert_eq!(version_of("tmux 3.3a"), Some((3, 3)));
        assert_eq!(version_of("bubblewrap 0.8.0"), Some((0, 8)));
        assert_eq!(
            version_of("restic 0.18.0 compiled with go1.24.4"),
            Some((0, 18))
        );
        assert_eq!(version_of("no digits"), None);
        assert_eq!(
            tool("tmux", Some("tmux 3.1c"), Some((3, 2))).status,
            Status::Fail
        );
        assert_eq!(
            tool("tmux", Some("tmux 3.3a"), Some((3, 2))),
            ok("tool tmux", "tmux 3.3a")
        );
        assert_eq!(
            tool("bwrap", None, None),
            fail(
                "tool bwrap",
                "bwrap is not installed (or not on PATH)",
                "run install.sh (on Debian it apt-gets the tools), or install it by hand"
            )
        );
    }

    #[test]
    fn stale_locks_are_old_or_of_a_process_gone_from_here() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let lock = |age: u64, alive: bool| Lock {
            repository: if alive { "restic" } else { "restic-changes" },
            time: format!("t-{age}"),
            taken: Some(now - Duration::from_secs(age)),
            hostname: "a".into(),
            pid: 7,
            alive,
        };
        assert_eq!(
            locks(&[lock(60, true)], now),
            ok("repository locks", "1 lock(s), none stale")
        );
        assert_eq!(
            locks(&[lock(60, true), lock(3600, true), lock(5, false)], now),
            fail(
                "repository locks",
                "stale: a pid 7 since t-3600 in restic; a pid 7 since t-5 in restic-changes",
                "run 'ag-box doctor --unlock' (removes stale locks only)"
            )
        );
    }

    #[test]
    fn config_files_are_private() {
        let f = "/root/.config/box/env";
        assert_eq!(
            config_file(f, 0, 0o100_600, 0, true),
            ok("file /root/.config/box/env", "mode 600")
        );
        assert_eq!(
            config_file(f, 0, 0o100_644, 0, true),
            fail(
                "file /root/.config/box/env",
                "mode 644: readable by other users",
                "chmod 600 /root/.config/box/env"
            )
        );
        assert_eq!(config_file("/n", 0, 0o644, 0, false).status, Status::Ok);
        assert_eq!(
            config_file("/n", 0, 0o664, 0, false).fix.as_deref(),
            Some("chmod 644 /n")
        );
        assert_eq!(
            config_file("/n", 1000, 0o600, 0, true).fix.as_deref(),
            Some("chown 0 /n")
        );
    }

    #[test]
    fn gpus_are_named() {
        assert_eq!(
            gpus(&["/dev/dri".into(), "/dev/nvidia0".into()]),
            ok(
                "GPUs",
                "/dev/dri, /dev/nvidia0 (bound into 'gpu=true' boxes)"
            )
        );
        assert_eq!(
            gpus(&[]).detail,
            "none here ('gpu=true' boxes get no device)"
        );
    }

    #[test]
    fn the_broker_ca_is_private_and_trusted_by_the_system_bundle() {
        let d = "/var/lib/ag-box/ca";
        assert_eq!(
            broker_ca(d, CaFound::Ready, true),
            ok(
                "credential broker CA",
                "/var/lib/ag-box/ca: ready, key root's alone"
            )
        );
        assert_eq!(
            broker_ca(d, CaFound::KeyOpen(0o644), true),
            fail(
                "credential broker CA",
                "/var/lib/ag-box/ca/ca-key.pem is readable by others (mode 644): boxes refuse to start",
                "rm -r /var/lib/ag-box/ca (the next box start makes a new CA)"
            )
        );
        assert_eq!(
            broker_ca(d, CaFound::Absent, false),
            warn(
                "credential broker CA",
                "/var/lib/ag-box/ca; no /etc/ssl/certs/ca-certificates.crt here, so only clients that read SSL_CERT_FILE and the like trust it",
                "install the ca-certificates package"
            )
        );
        assert_eq!(broker_ca(d, CaFound::OtherHosts, true).status, Status::Ok);
        assert_eq!(broker_ca(d, CaFound::Absent, true).status, Status::Ok);
    }

    #[test]
    fn clocks_space_peers_and_agents() {
        const GIB: u64 = 1 << 30;
        assert_eq!(clock(2, 7200).status, Status::Ok);
        assert_eq!(clock(-30, 7200).status, Status::Warn);
        assert_eq!(clock(900, 7200).status, Status::Fail);
        assert_eq!(free_space("/root", GIB / 2, 100 * GIB).status, Status::Fail);
        assert_eq!(free_space("/root", 4 * GIB, 10 * GIB).status, Status::Warn);
        assert_eq!(free_space("/root", 50 * GIB, 100 * GIB).status, Status::Ok);
        assert_eq!(
            peer("b", Ok("ag-box 0.1.0\n"), "ag-box 0.1.0").status,
            Status::Ok
        );
        assert_eq!(
            peer("b", Ok("ag-box 0.0.9"), "ag-box 0.1.0").detail,
            "runs ag-box 0.0.9 but this node runs ag-box 0.1.0"
        );
        assert_eq!(peer("b", Err("timed out"), "x").status, Status::Fail);
        let here = vec![
            ("claude".to_string(), Some("2.1.197".to_string())),
            ("codex".to_string(), None),
        ];
        let same = vec![("b".to_string(), here.clone())];
        assert_eq!(agents(&here, &same), ok("agent CLIs", "claude 2.1.197"));
        let other = vec![(
            "b".to_string(),
            vec![("claude".to_string(), Some("2.1.198".to_string()))],
        )];
        assert_eq!(
            agents(&here, &other).detail,
            "claude 2.1.197; differ: claude: 2.1.197 here, 2.1.198 on b"
        );
        let none = vec![("claude".to_string(), None)];
        assert_eq!(
            agents(&none, &[]),
            warn(
                "agent CLIs",
                "none installed here: a box on this node has no agent to run",
                "install one (e.g. 'npm install -g @anthropic-ai/claude-code'), the same version on every node"
            )
        );
    }
}
