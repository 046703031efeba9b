//! `doctor [--json] [--unlock]`: is this node set up right? One line per check (tools, runtime,
//! config files, store, repository, peers, timers, TIOCSTI, free space, agent CLIs), each
//! failure with its fix; exit 0 when nothing fails.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{Ctx, JSON_SCHEMA_VERSION};
use crate::config;
use crate::error::UserError;
use crate::plan::agents;
use crate::plan::doctor::{self, Check, Status, fail, ok, warn};
use crate::plan::restic::Repository;
use crate::plan::text;
use crate::sys::cmd;
use crate::sys::nodes::Nodes;
use crate::sys::restic::{Restic, short};

#[derive(Serialize)]
struct Report<'a> {
    schema_version: u32,
    node: &'a str,
    checks: &'a [Check],
}

pub(crate) fn run(json: bool, unlock: bool) -> Result<()> {
    let mut checks = tools();
    let ctx = match Ctx::load() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            checks.push(fail(
                "config",
                format!("{e:#}"),
                "fix the env file (see env.example), then run 'ag-box doctor' again",
            ));
            None
        }
    };
    checks.extend(runtime());
    checks.extend(config_files());
    if let Some(ctx) = &ctx {
        checks.extend(store(ctx));
        checks.extend(repository(ctx, unlock));
        checks.extend(peers_and_agents(ctx));
        checks.push(free_space(&ctx.config.home));
        checks.push(crate::sys::node_ca::check(&ctx.config.state_dir.join("ca")));
        checks.extend(oauth_logins(ctx));
    }
    checks.extend(timers());
    checks.push(tiocsti());
    checks.push(doctor::gpus(
        &crate::sys::host::gpu(Path::new("/dev")).devices,
    ));
    let node = ctx.as_ref().map_or("?", |c| c.config.node.as_str());
    if json {
        let report = Report {
            schema_version: JSON_SCHEMA_VERSION,
            node,
            checks: &checks,
        };
        super::print_json(&report)?;
    } else {
        for c in &checks {
            let status = match c.status {
                Status::Ok => "ok",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            out!("{status:<5} {:<28} {}", c.check, c.detail);
            if let Some(fix) = &c.fix {
                out!("{:<34} fix: {fix}", "");
            }
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if failed > 0 {
        return Err(UserError::failed(
            format!(
                "doctor: {} failed on node {node}",
                text::count(failed, "check")
            ),
            "apply each 'fix:' above, then run 'ag-box doctor' again",
        )
        .into());
    }
    Ok(())
}

/// The first line a tool prints about its version (some print it on stderr).
fn first_line(tool: &str, args: &[&str]) -> Option<String> {
    let path = cmd::which(tool)?;
    let out = Command::new(path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    Some(
        String::from_utf8_lossy(&text)
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
    )
}

fn tools() -> Vec<Check> {
    [
        ("bwrap", "--version", None),
        ("restic", "version", Some((0, 14))),
        ("tmux", "-V", Some((3, 2))),
        ("ssh", "-V", None),
        ("nsenter", "--version", None),
        ("unshare", "--version", None),
        ("ip", "-V", None),
    ]
    .into_iter()
    .map(|(tool, arg, min)| {
        let mut c = doctor::tool(tool, first_line(tool, &[arg]).as_deref(), min);
        if tool == "restic" && c.status == Status::Ok {
            let in_place = doctor::version_of(&c.detail).is_some_and(|v| v >= (0, 17));
            c.detail.push_str(if in_place {
                " (restores an older copy in place)"
            } else {
                " (restores through a staging copy; 0.17+ restores in place)"
            });
        }
        c
    })
    .collect()
}

fn runtime() -> Vec<Check> {
    let systemd = if Path::new("/run/systemd/system").exists() {
        ok("runtime", "systemd is PID 1: boxes run as transient units")
    } else {
        warn(
            "runtime",
            "systemd is not PID 1: the direct runtime (memory limits only where a memory cgroup is writable, tasks bounded per uid, no snapshot timer)",
            "run ag-box on a host booted with systemd for timed snapshots and enforced limits",
        )
    };
    let controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").ok();
    let cgroup = match controllers {
        Some(c) if c.split_whitespace().any(|x| x == "memory") => ok(
            "cgroup",
            "v2 with the memory controller: MemoryMax is enforced",
        ),
        Some(_) => warn(
            "cgroup",
            "v2 without the memory controller: MemoryMax is not enforced",
            "enable the memory controller (cgroup_enable=memory on the kernel command line)",
        ),
        None => warn(
            "cgroup",
            "v1 (or hybrid): MemoryMax is applied as v1's memory limit, with less protection",
            "boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2",
        ),
    };
    let freezer = if crate::sys::freezer::v2_mount().is_some() {
        ok(
            "snapshot pause",
            "cgroup v2 is mounted: a running box is paused while its snapshot reads it",
        )
    } else {
        warn(
            "snapshot pause",
            "no cgroup v2: a running box cannot be paused for its snapshots (one that reads another owner's file is refused as partial)",
            "mount cgroup v2 (systemd.unified_cgroup_hierarchy=1, or hybrid's /sys/fs/cgroup/unified)",
        )
    };
    vec![systemd, cgroup, freezer]
}

fn config_files() -> Vec<Check> {
    let home = std::env::var_os("HOME").map_or_else(|| "/root".into(), std::path::PathBuf::from);
    let dir = config::config_dir(&home);
    let me = nix::unistd::getuid().as_raw();
    [("env", true), ("nodes", false)]
        .into_iter()
        .filter_map(|(file, secret)| {
            let path = dir.join(file);
            let meta = std::fs::metadata(&path).ok()?;
            Some(doctor::config_file(
                &path.display().to_string(),
                meta.uid(),
                meta.mode(),
                me,
                secret,
            ))
        })
        .collect()
}

fn store(ctx: &Ctx) -> Vec<Check> {
    let store = ctx.store.describe();
    if let Err(e) = ctx.store.check_reachable() {
        return vec![fail(
            "store",
            format!("{store}: {}", detail_of(&e)),
            fix_of(&e),
        )];
    }
    let mut out = vec![ok(
        "store",
        format!("{store}: reachable, credentials accepted"),
    )];
    let probe = format!("probe/doctor-{}-{}", ctx.config.node, std::process::id());
    out.push(match ctx.store.conditional_writes(&probe) {
        Ok(true) => ok("conditional writes", "honoured: leases are safe"),
        Ok(false) => fail(
            "conditional writes",
            format!("{store} ignores If-None-Match/If-Match: a box could run on two nodes at once"),
            "use an endpoint that honours them (Cloudflare R2, AWS S3)",
        ),
        Err(e) => fail("conditional writes", detail_of(&e), fix_of(&e)),
    });
    // The system clock is what is checked against the store's.
    let before = SystemTime::now();
    match ctx.store.server_time(&probe) {
        Ok(Some(theirs)) => {
            let mid = before + SystemTime::now().duration_since(before).unwrap_or_default() / 2;
            let skew = match theirs.duration_since(mid) {
                Ok(ahead) => ahead.as_secs_f64(),
                Err(behind) => -behind.duration().as_secs_f64(),
            };
            // Seconds of skew between two clocks: far inside i64.
            #[allow(clippy::cast_possible_truncation)]
            let skew = skew.round() as i64;
            out.push(doctor::clock(skew, ctx.config.lease_ttl.as_secs()));
        }
        Ok(None) => {}
        Err(e) => out.push(fail("clock", detail_of(&e), fix_of(&e))),
    }
    out
}

/// The hint of the innermost operator-facing error, as a check's fix.
fn fix_of(e: &anyhow::Error) -> String {
    e.chain()
        .filter_map(|c| c.downcast_ref::<UserError>())
        .last()
        .and_then(|u| u.hint.clone())
        .unwrap_or_else(|| "see the message".to_string())
}

/// The error's whole chain without its hint (the fix says it).
fn detail_of(e: &anyhow::Error) -> String {
    let (line, _) = crate::error::report(e);
    line.split_once("; hint: ")
        .map_or(line.clone(), |(d, _)| d.to_string())
}

fn repository(ctx: &Ctx, unlock: bool) -> Vec<Check> {
    let restic = match ctx.restic() {
        Ok(r) => r,
        Err(e) => return vec![fail("repository", detail_of(&e), fix_of(&e))],
    };
    let repo = restic.describe().to_string();
    match restic.exists() {
        Ok(true) => {}
        Ok(false) => {
            return vec![fail(
                "repository",
                format!("{repo} does not exist"),
                "run 'ag-box init'",
            )];
        }
        Err(e) => return vec![fail("repository", detail_of(&e), fix_of(&e))],
    }
    let mut out = vec![ok("repository", format!("{repo}: reachable"))];
    out.push(match restic.node_key_id() {
        Some(id) => ok("restic key", format!("this node's own ({})", short(id))),
        None => warn(
            "restic key",
            "this node has no key of its own: every restic command derives the key of RESTIC_PASSWORD (about half a second)",
            "run 'ag-box init' on this node (it adds one)",
        ),
    });
    let (changes, changes_there) = changes_repository(ctx, unlock);
    out.push(changes);
    if unlock && let Err(e) = restic.unlock() {
        out.push(fail(
            "repository locks",
            format!("restic unlock: {e:#}"),
            "see the message",
        ));
    }
    let locks = std::iter::once(restic)
        .chain(&changes_there)
        .map(locks_seen)
        .collect::<Result<Vec<_>>>()
        .map(|each| each.into_iter().flatten().collect::<Vec<_>>());
    out.push(match locks {
        // The system clock, which restic stamped its locks with.
        Ok(seen) => doctor::locks(&seen, SystemTime::now()),
        Err(e) => fail("repository locks", detail_of(&e), fix_of(&e)),
    });
    out
}

/// The locks in a repository, each told alive or not where this node holds it.
fn locks_seen(restic: &Restic) -> Result<Vec<doctor::Lock>> {
    let here = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let locks = restic
        .locks()
        .with_context(|| format!("listing the locks of {}", restic.describe()))?;
    Ok(locks
        .into_iter()
        .map(|l| doctor::Lock {
            repository: restic.which().dir(),
            taken: humantime::parse_rfc3339_weak(&l.time).ok(),
            alive: l.hostname != here
                || l.pid <= 0
                || Path::new(&format!("/proc/{}", l.pid)).exists(),
            time: l.time,
            hostname: l.hostname,
            pid: l.pid,
        })
        .collect())
}

/// Where a park's changes go: their own repository (`ag-box init` makes it), else the main one,
/// whose whole index every restic command loads first. The repository too, when it exists.
fn changes_repository(ctx: &Ctx, unlock: bool) -> (Check, Option<Restic>) {
    let label = "changes repository";
    let changes = match Restic::open(&ctx.config, Repository::Changes) {
        Ok(r) => r,
        Err(e) => return (fail(label, detail_of(&e), fix_of(&e)), None),
    };
    let repo = changes.describe().to_string();
    let exists = changes.exists();
    if unlock
        && matches!(exists, Ok(true))
        && let Err(e) = changes.unlock()
    {
        // Its locks are still listed: what is stale there shows.
        return (
            fail(label, format!("restic unlock: {e:#}"), "see the message"),
            Some(changes),
        );
    }
    let there = matches!(exists, Ok(true));
    let check = match exists {
        Ok(true) if changes.node_key_id().is_some() => ok(label, format!("{repo}: reachable")),
        Ok(true) => warn(
            label,
            format!(
                "{repo}: reachable, but this node has no key of its own there: its parks save their changes in the main repository"
            ),
            "run 'ag-box init' on this node (it adds one)",
        ),
        // Local repositories are made at their first use.
        Ok(false) if ctx.config.s3.is_none() => ok(label, format!("{repo}: made at its first use")),
        Ok(false) => warn(
            label,
            format!(
                "{repo} does not exist: a park's changes go to the main repository, and restic loads its whole index to save or restore them"
            ),
            "run 'ag-box init' (it makes it; what is saved stays where it is)",
        ),
        Err(e) => fail(label, detail_of(&e), fix_of(&e)),
    };
    (check, there.then_some(changes))
}

/// `<cli> --version` of each agent CLI here (None: not installed).
fn agent_versions() -> Vec<(String, Option<String>)> {
    agents::AGENTS
        .iter()
        .map(|a| (a.binary.to_string(), first_line(a.binary, &["--version"])))
        .collect()
}

fn peers_and_agents(ctx: &Ctx) -> Vec<Check> {
    let mine = format!("ag-box {}", env!("CARGO_PKG_VERSION"));
    // One ssh per node, all at once: its ag-box version, then one line per agent CLI.
    let script = format!(
        "ag-box --version && for c in {}; do printf '%s ' $c; ($c --version 2>/dev/null || echo none) | head -1; done",
        agents::AGENTS
            .iter()
            .map(|a| a.binary)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let peers: Vec<(&str, &str)> = ctx
        .config
        .nodes
        .iter()
        .filter(|n| n.name != ctx.config.node)
        .filter_map(|n| Some((n.name.as_str(), n.ssh_alias.as_deref()?)))
        .collect();
    let answers = match Nodes::new() {
        Ok(nodes) => nodes.script_all(&peers, &script),
        Err(e) => peers
            .iter()
            .map(|(node, _)| (node.to_string(), Err(format!("{e:#}"))))
            .collect(),
    };
    let mut out = Vec::new();
    let mut theirs = Vec::new();
    for (node, answer) in &answers {
        let version = answer.as_deref().map(|t| t.lines().next().unwrap_or(""));
        out.push(doctor::peer(node, version.map_err(String::as_str), &mine));
        if let Ok(text) = answer {
            let clis = text
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(' '))
                .map(|(c, v)| (c.to_string(), (v != "none").then(|| v.to_string())))
                .collect();
            theirs.push((node.clone(), clis));
        }
    }
    out.push(doctor::agents(&agent_versions(), &theirs));
    out
}

/// The broker's OAuth logins: when this node's expires, and whether the store's copy (where
/// nodes share one) opens with this node's `RESTIC_PASSWORD`.
fn oauth_logins(ctx: &Ctx) -> Vec<Check> {
    use crate::plan::doctor::StoredFound;
    use crate::store::Accounts;
    let store: &dyn Accounts = ctx.store.as_ref();
    super::refresh::oauth_files(ctx)
        .into_iter()
        .flat_map(|(row, file)| {
            // A file that holds no login of this row (Codex's with an API key alone) is none.
            let on_node = match crate::sys::oauth_refresh::read_text(&file) {
                Ok(text) => Ok(crate::plan::broker::shape_of(row)
                    .tokens(&text)
                    .map(|t| crate::plan::text::rfc3339_ms(t.expires_at_ms))),
                Err(_) if !file.exists() => Ok(None),
                Err(e) => Err(format!("{e:#}")),
            };
            let stored = if store.keeps_accounts() {
                match store.account(row) {
                    Ok(None) => StoredFound::Absent,
                    Ok(Some((bytes, _))) => stored_found(&bytes, ctx),
                    Err(e) => StoredFound::Unreadable(format!("{e:#}")),
                }
            } else {
                StoredFound::NotShared
            };
            let (journal, found) = crate::sys::oauth_refresh::cut_short(&file);
            let found = found.map(|text| text.map(drop).map_err(|e| format!("{e:#}")));
            let shown = crate::plan::text::escaped(&journal.to_string_lossy());
            std::iter::once(doctor::oauth_login(row, &on_node, &stored))
                .chain(doctor::cut_short_refresh(row, &shown, found))
        })
        .collect()
}

/// What this node finds of the store's copy of a login.
fn stored_found(bytes: &[u8], ctx: &Ctx) -> crate::plan::doctor::StoredFound {
    use crate::plan::doctor::StoredFound;
    let Ok(stored) = serde_json::from_slice::<crate::plan::oauth::StoredLogin>(bytes) else {
        return StoredFound::Unreadable("not a login the broker keeps".into());
    };
    if stored.sealed.is_none() {
        return StoredFound::Absent;
    }
    let Some(password) = &ctx.config.restic_password else {
        return StoredFound::Sealed("this node has no RESTIC_PASSWORD".into());
    };
    match crate::sys::oauth_refresh::open_stored(&stored, password.expose().as_bytes()) {
        Ok(_) => StoredFound::Opens {
            expires: crate::plan::text::rfc3339_ms(stored.expires_at_ms),
            by: stored.refreshed_by.unwrap_or_else(|| "?".into()),
        },
        Err(e) => StoredFound::Sealed(format!("{e:#}")),
    }
}

fn free_space(home: &Path) -> Check {
    match nix::sys::statvfs::statvfs(home) {
        Ok(s) => {
            let block = s.fragment_size();
            doctor::free_space(
                &home.display().to_string(),
                s.blocks_available() * block,
                s.blocks() * block,
            )
        }
        Err(e) => fail(
            "free space",
            format!("statvfs {}: {e}", home.display()),
            "see the message",
        ),
    }
}

fn timers() -> Vec<Check> {
    if !Path::new("/run/systemd/system").exists() {
        return vec![];
    }
    ["box-snapshot", "box-globals", "box-prune"]
        .into_iter()
        .map(|unit| {
            let check = format!("timer {unit}");
            let enabled = first_line("systemctl", &["is-enabled", &format!("{unit}.timer")]);
            if enabled.as_deref() != Some("enabled") {
                return warn(
                    &check,
                    format!(
                        "{unit}.timer is not enabled ({})",
                        enabled.unwrap_or_default()
                    ),
                    "run install.sh (it installs and enables the timers)",
                );
            }
            let result = first_line(
                "systemctl",
                &[
                    "show",
                    &format!("{unit}.service"),
                    "-p",
                    "Result",
                    "--value",
                ],
            )
            .unwrap_or_default();
            if result == "success" {
                ok(&check, "enabled; last run succeeded (or none yet)")
            } else {
                fail(
                    &check,
                    format!("enabled; last run: {result}"),
                    format!("see 'journalctl -u {unit}.service' and fix what it says"),
                )
            }
        })
        .collect()
}

fn tiocsti() -> Check {
    match std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti") {
        Ok(v) if v.trim() == "0" => ok(
            "TIOCSTI",
            "dev.tty.legacy_tiocsti = 0: no typing into a terminal",
        ),
        Ok(v) => warn(
            "TIOCSTI",
            format!(
                "dev.tty.legacy_tiocsti = {}: a process may type into its terminal",
                v.trim()
            ),
            "sysctl -w dev.tty.legacy_tiocsti=0 (install.sh makes it permanent)",
        ),
        Err(_) => warn(
            "TIOCSTI",
            "this kernel (before 6.2) cannot turn TIOCSTI off",
            "a 6.2 or newer kernel",
        ),
    }
}
