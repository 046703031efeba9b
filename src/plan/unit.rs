//! How a box process tree is launched: the systemd-run argv and the anchor argv.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::agent_home::Access;
use super::egress::NODE_LIST;
use super::sandbox::BoxSpec;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The hidden subcommand that opens bwrap's info fd and runs (or supervises) bwrap.
pub(crate) const ANCHOR_SUBCOMMAND: &str = "__anchor";
/// The hidden subcommand of a box's egress proxy.
pub(crate) const PROXY_SUBCOMMAND: &str = "__proxy";
/// What a box's proxy runs to refresh an OAuth login where nodes share a store.
pub(crate) const REFRESH_SUBCOMMAND: &str = "__refresh";

pub(crate) fn unit_name(box_name: &str) -> String {
    format!("boxrun-{box_name}")
}

/// The hidden subcommand that publishes a box's agent state (`commands::watch`).
pub(crate) const WATCH_SUBCOMMAND: &str = "__watch";

/// The unit of a box's state watcher, bound to the box's unit.
pub(crate) fn watch_unit_name(box_name: &str) -> String {
    format!("boxwatch-{box_name}")
}

/// The transient service of a box's state watcher: stopped with the box, started again if it
/// fails; it reads ag-box's config as the timers do (`$HOME/.config/box`, or the dirs named).
pub(crate) fn watch_unit_argv(spec: &BoxSpec, env: &[(&str, String)]) -> Vec<String> {
    let bound = format!("{}.service", unit_name(&spec.name));
    let mut a = systemd_run_head(
        &watch_unit_name(&spec.name),
        &format!("ag-box {} agent state", spec.name),
    );
    for p in [
        format!("BindsTo={bound}"),
        format!("After={bound}"),
        "Restart=on-failure".into(),
        "RestartSec=5s".into(),
        "NoNewPrivileges=yes".into(),
    ] {
        a.extend(["--property".into(), p]);
    }
    for (k, v) in env {
        a.push(format!("--setenv={k}={v}"));
    }
    a.extend([s(&spec.exe), WATCH_SUBCOMMAND.into(), spec.name.clone()]);
    a
}

/// The hidden verb that takes a quick park's whole snapshot (`lifecycle::finish`).
pub(crate) const FINISH_SUBCOMMAND: &str = "__finish-park";

pub(crate) fn finish_unit_name(box_name: &str) -> String {
    format!("boxfinish-{box_name}")
}

/// The transient service that takes a quick park's whole snapshot once the command that
/// parked the box has ended; it reads ag-box's config as the timers do.
pub(crate) fn finish_unit_argv(spec: &BoxSpec, env: &[(&str, String)]) -> Vec<String> {
    let mut a = systemd_run_head(
        &finish_unit_name(&spec.name),
        &format!("ag-box {} whole snapshot after a quick park", spec.name),
    );
    // The park that starts it does not wait for it to begin (it runs beside, and ends
    // itself where another command on the box came first).
    a.push("--no-block".into());
    for (k, v) in env {
        a.push(format!("--setenv={k}={v}"));
    }
    a.extend([s(&spec.exe), FINISH_SUBCOMMAND.into(), spec.name.clone()]);
    a
}

/// The unit of a box's egress proxy, bound to the box's unit.
pub(crate) fn proxy_unit_name(box_name: &str) -> String {
    format!("boxnet-{box_name}")
}

/// `ag-box __anchor [--supervise [--netns <pin>]] --info <file> -- bwrap <args>`. Under
/// systemd the unit itself joins the namespace; the direct supervisor joins it for bwrap and
/// keeps the proxy running.
pub(crate) fn anchor_argv(
    spec: &BoxSpec,
    supervise: bool,
    bwrap: &Path,
    bwrap_args: &[String],
) -> Vec<String> {
    let mut a = vec![s(&spec.exe), ANCHOR_SUBCOMMAND.to_string()];
    if supervise {
        a.push("--supervise".into());
        if let Some(netns) = spec.netns() {
            a.extend(["--netns".into(), s(&netns)]);
        }
    }
    a.extend(["--info".into(), s(&spec.info_file()), "--".into(), s(bwrap)]);
    a.extend(bwrap_args.iter().cloned());
    a
}

/// systemd's own sandboxing of the unit, under bwrap's: what still lets bwrap build the box
/// (mounts, namespaces, the drop to the box user) and nothing more. `ProtectSystem=strict`
/// leaves writable only the paths the box writes (given as `ReadWritePaths`).
pub(crate) const HARDENING: &[&str] = &[
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectHostname=yes",
    "LockPersonality=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "SystemCallArchitectures=native",
    "CapabilityBoundingSet=CAP_SYS_ADMIN CAP_SYS_CHROOT CAP_SETUID CAP_SETGID CAP_SETPCAP \
     CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_NET_ADMIN",
];

/// `ag-box __proxy ...` for the box `name` in its own network namespace.
pub(crate) fn proxy_argv(exe: &Path, name: &str, run_dir: &Path, netns: &Path) -> Vec<String> {
    vec![
        s(exe),
        PROXY_SUBCOMMAND.into(),
        "--box".into(),
        name.into(),
        "--netns".into(),
        s(netns),
        "--run-dir".into(),
        s(run_dir),
        "--node-list".into(),
        NODE_LIST.into(),
    ]
}

/// How soon a dead proxy is started again.
pub(crate) const PROXY_RESTART: Duration = Duration::from_millis(200);
/// A box's proxy's memory, apart from the box's: a box that opens connections without end
/// costs its proxy, not the node.
pub(crate) const PROXY_MEMORY_MAX: u64 = 256 << 20;

/// The proxy's unit: it stops with the box's, comes back whenever it dies, and may do nothing
/// but join the box's namespace once, write its run dir, resolve names and connect out.
pub(crate) fn proxy_unit_argv(spec: &BoxSpec, proxy: &[String]) -> Vec<String> {
    let bound = format!("{}.service", unit_name(&spec.name));
    let mut a = systemd_run_head(
        &proxy_unit_name(&spec.name),
        &format!("ag-box {} egress proxy", spec.name),
    );
    // Queued behind the box's start (After=), not waited for: `up` waits for it to answer.
    a.push("--no-block".into());
    let props = [
        format!("BindsTo={bound}"),
        format!("After={bound}"),
        "Restart=always".into(),
        format!("RestartSec={}ms", PROXY_RESTART.as_millis()),
        "StartLimitIntervalSec=0".into(),
        format!("MemoryMax={}M", PROXY_MEMORY_MAX >> 20),
        // A refresher of an OAuth login (`ag-box __refresh`) runs in this unit: an OOM kill of
        // the proxy does not stop it, and a stop leaves it the time it may take.
        "OOMPolicy=continue".into(),
        "TimeoutStopSec=120s".into(),
        "NoNewPrivileges=yes".into(),
        "ProtectSystem=strict".into(),
        "ProtectHome=read-only".into(),
        "PrivateTmp=yes".into(),
        "ProtectKernelTunables=yes".into(),
        "ProtectKernelModules=yes".into(),
        "ProtectKernelLogs=yes".into(),
        "ProtectControlGroups=yes".into(),
        "ProtectHostname=yes".into(),
        "LockPersonality=yes".into(),
        "RestrictRealtime=yes".into(),
        "RestrictSUIDSGID=yes".into(),
        "SystemCallArchitectures=native".into(),
        "CapabilityBoundingSet=CAP_SYS_ADMIN".into(),
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK".into(),
        format!("ReadWritePaths={}", spec.run_dir.display()),
    ];
    // The OAuth logins its refresher rewrites: the dir, not the file (the operator's own CLI may
    // replace the file, and a bind of it would keep the old one here).
    let oauth = spec
        .broker_oauth_dirs()
        .into_iter()
        .map(|d| format!("ReadWritePaths=-{}", d.display()));
    for p in props.into_iter().chain(oauth) {
        a.extend(["-p".into(), p]);
    }
    a.push("--".into());
    a.extend(proxy.iter().cloned());
    a
}

/// What a box writes on the host: its project, agent home, run dir and the shared credentials.
pub(crate) fn writable_paths(spec: &BoxSpec, exists: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut paths = vec![
        spec.project.clone(),
        spec.agent_home.root.clone(),
        spec.run_dir.clone(),
    ];
    paths.extend(
        spec.agent_home
            .binds(exists)
            .into_iter()
            .filter(|b| b.access == Access::ReadWrite && !b.src.starts_with(&spec.agent_home.root))
            .map(|b| b.src),
    );
    paths
}

/// `systemctl show` of what [`loaded_units`] reads, for these units.
pub(crate) fn show_states_argv(units: &[&str]) -> Vec<String> {
    ["show", "-p", "Id", "-p", "ActiveState", "-p", "Job"]
        .iter()
        .chain(units)
        .map(|s| (*s).to_string())
        .collect()
}

/// The units that `systemctl show` ([`show_states_argv`]) says a stop has something to do
/// for: loaded (active, activating, deactivating or restarting), or with a job queued (a start
/// queued and not yet run is inactive). A unit systemd does not know is inactive.
pub(crate) fn loaded_units(shown: &str) -> Vec<String> {
    shown
        .split("\n\n")
        .filter_map(|unit| {
            let field = |key: &str| {
                unit.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
            };
            let id = field("Id")?;
            let idle = matches!(field("ActiveState"), None | Some("inactive" | "failed"))
                && field("Job").is_none();
            (!idle).then(|| id.to_string())
        })
        .collect()
}

/// `systemd-run` of a transient service that is collected when it ends, even failed.
fn systemd_run_head(unit: &str, description: &str) -> Vec<String> {
    [
        "systemd-run",
        "--unit",
        unit,
        "--description",
        description,
        "--collect",
        "--quiet",
    ]
    .map(String::from)
    .to_vec()
}

/// The transient service around the anchor.
pub(crate) fn systemd_run_argv(
    spec: &BoxSpec,
    memory_max: Option<&str>,
    writable: &[PathBuf],
    anchor: &[String],
) -> Vec<String> {
    let mut a = systemd_run_head(&unit_name(&spec.name), &format!("ag-box {}", spec.name));
    if let Some(m) = memory_max {
        a.extend(["-p".into(), format!("MemoryMax={m}")]);
    }
    if let Some(netns) = spec.netns() {
        a.extend([
            "-p".into(),
            format!("NetworkNamespacePath={}", netns.display()),
        ]);
    }
    a.extend([
        "-p".into(),
        "OOMPolicy=continue".into(),
        "-p".into(),
        format!("TasksMax={}", spec.tasks_max),
    ]);
    for p in HARDENING {
        a.extend(["-p".into(), p.to_string()]);
    }
    for p in writable {
        // `-`: a path that is missing is no reason to fail the start.
        a.extend(["-p".into(), format!("ReadWritePaths=-{}", p.display())]);
    }
    a.extend([
        "-E".into(),
        format!("HOME={}", spec.home().display()),
        "--".into(),
    ]);
    a.extend(anchor.iter().cloned());
    a
}

/// Memory limits: a number with an optional K/M/G/T suffix, a percentage up to 100, or
/// `infinity`; never zero (a box that could not start).
pub(crate) fn valid_memory_max(v: &str) -> bool {
    if v == "infinity" {
        return true;
    }
    let digits = v.strip_suffix(['K', 'M', 'G', 'T', '%']).unwrap_or(v);
    let Ok(n) = digits.parse::<u64>() else {
        return false;
    };
    digits.chars().all(|c| c.is_ascii_digit()) && n > 0 && (!v.ends_with('%') || n <= 100)
}

/// Bytes for a cgroup limit file (direct runtime): a percentage of `total`; None for infinity.
pub(crate) fn memory_limit_bytes(v: &str, total: u64) -> Option<u64> {
    match v.strip_suffix('%') {
        Some(p) => u64::try_from(u128::from(total) * u128::from(p.parse::<u64>().ok()?) / 100).ok(),
        None => memory_max_bytes(v),
    }
}

/// Bytes of a size (a number with an optional K/M/G/T suffix); None for percentages and
/// infinity.
pub(crate) fn memory_max_bytes(v: &str) -> Option<u64> {
    let (digits, shift) = match v.chars().last()? {
        'K' => (&v[..v.len() - 1], 10),
        'M' => (&v[..v.len() - 1], 20),
        'G' => (&v[..v.len() - 1], 30),
        'T' => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// The name of the direct runtime's cgroups for a box (v2, and v1 memory on hybrid hosts).
pub(crate) fn direct_cgroup_name(box_name: &str) -> String {
    format!("ag-box-{box_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::egress::{BoxPolicy, Mode};
    use pretty_assertions::assert_eq;

    fn spec() -> BoxSpec {
        BoxSpec::sample()
    }

    #[test]
    fn loaded_units_are_those_a_stop_has_something_to_do_for() {
        assert_eq!(
            show_states_argv(&["boxnet-demo", "boxwatch-demo"]),
            [
                "show",
                "-p",
                "Id",
                "-p",
                "ActiveState",
                "-p",
                "Job",
                "boxnet-demo",
                "boxwatch-demo"
            ]
        );
        let shown = "Id=boxnet-demo.service\nActiveState=active\nJob=\n\n\
                     Id=nosuch.service\nActiveState=inactive\nJob=\n\n\
                     Id=boxwatch-demo.service\nActiveState=failed\nJob=\n\n\
                     Id=boxfinish-demo.service\nActiveState=deactivating\nJob=\n\n\
                     Id=boxrun-demo.service\nActiveState=activating\nJob=\n\n\
                     Id=boxfinish-other.service\nActiveState=inactive\nJob=4127\n";
        assert_eq!(
            loaded_units(shown),
            [
                "boxnet-demo.service",
                "boxfinish-demo.service",
                "boxrun-demo.service",
                "boxfinish-other.service"
            ]
        );
        assert_eq!(loaded_units(""), Vec::<String>::new());
    }

    #[test]
    #[rustfmt::skip]
    fn systemd_run_wraps_the_anchor_in_a_hardened_unit() {
        let spec = spec();
        let anchor = anchor_argv(&spec, false, Path::new("/usr/bin/bwrap"), &["--unshare-pid".to_string()]);
        let present = ["/root/.claude/.credentials.json", "/root/.gitconfig"];
        let writable = writable_paths(&spec, |p| present.iter().any(|x| Path::new(x) == p));
        assert_eq!(
            systemd_run_argv(&spec, Some("1500M"), &writable, &anchor),
            [
                "systemd-run", "--unit", "boxrun-demo", "--description", "ag-box demo",
                "--collect", "--quiet", "-p", "MemoryMax=1500M",
                "-p", "NetworkNamespacePath=/run/box/.netns/demo", "-p", "OOMPolicy=continue",
                "-p", "TasksMax=4096", "-p", "NoNewPrivileges=yes", "-p", "ProtectSystem=strict", "-p", "PrivateTmp=yes",
                "-p", "ProtectKernelTunables=yes", "-p", "ProtectKernelModules=yes",
                "-p", "ProtectKernelLogs=yes", "-p", "ProtectControlGroups=yes",
                "-p", "ProtectHostname=yes", "-p", "LockPersonality=yes",
                "-p", "RestrictRealtime=yes", "-p", "RestrictSUIDSGID=yes",
                "-p", "SystemCallArchitectures=native",
                "-p", "CapabilityBoundingSet=CAP_SYS_ADMIN CAP_SYS_CHROOT CAP_SETUID CAP_SETGID CAP_SETPCAP \
                       CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_NET_ADMIN",
                "-p", "ReadWritePaths=-/root/demo",
                "-p", "ReadWritePaths=-/var/lib/ag-box/homes/demo",
                "-p", "ReadWritePaths=-/run/box/demo",
                "-p", "ReadWritePaths=-/root/.claude/.credentials.json",
                "-E", "HOME=/root", "--",
                "/opt/box/bin/ag-box", "__anchor", "--info", "/run/box/demo/info.json", "--",
                "/usr/bin/bwrap", "--unshare-pid",
            ]
        );
    }

    #[test]
    #[rustfmt::skip]
    fn the_whole_snapshot_after_a_quick_park_runs_in_a_unit_of_its_own_with_this_commands_env() {
        let env = [("HOME", "/root".to_string()), ("PATH", "/opt/box/bin:/usr/bin".to_string())];
        assert_eq!(
            finish_unit_argv(&spec(), &env),
            [
                "systemd-run", "--unit", "boxfinish-demo",
                "--description", "ag-box demo whole snapshot after a quick park",
                "--collect", "--quiet", "--no-block",
                "--setenv=HOME=/root", "--setenv=PATH=/opt/box/bin:/usr/bin",
                "/opt/box/bin/ag-box", "__finish-park", "demo",
            ]
        );
        // The verb the unit runs is one the CLI knows.
        assert!(crate::cli::command().find_subcommand(FINISH_SUBCOMMAND).is_some());
    }

    #[test]
    fn no_memory_max_means_no_property() {
        let argv = systemd_run_argv(&spec(), None, &[], &["a".to_string()]);
        assert!(!argv.iter().any(|a| a.starts_with("MemoryMax")));
    }

    #[test]
    fn supervised_anchor_joins_the_namespace_unless_on_the_host_network() {
        let spec = spec();
        assert_eq!(
            anchor_argv(&spec, true, Path::new("/b"), &[]),
            [
                "/opt/box/bin/ag-box",
                "__anchor",
                "--supervise",
                "--netns",
                "/run/box/.netns/demo",
                "--info",
                "/run/box/demo/info.json",
                "--",
                "/b"
            ]
        );
        let host = BoxSpec {
            egress: BoxPolicy {
                mode: Mode::Host,
                allow: vec![],
            },
            ..spec
        };
        assert_eq!(
            anchor_argv(&host, true, Path::new("/b"), &[]),
            [
                "/opt/box/bin/ag-box",
                "__anchor",
                "--supervise",
                "--info",
                "/run/box/demo/info.json",
                "--",
                "/b"
            ]
        );
        let argv = systemd_run_argv(&host, None, &[], &["a".to_string()]);
        assert!(!argv.iter().any(|a| a.starts_with("NetworkNamespacePath")));
    }

    #[test]
    #[rustfmt::skip]
    fn the_proxy_unit_is_bound_to_the_box_and_restarts() {
        let spec = spec();
        let proxy = proxy_argv(&spec.exe, &spec.name, &spec.run_dir, &spec.netns_pin());
        assert_eq!(
            proxy_unit_argv(&spec, &proxy),
            [
                "systemd-run", "--unit", "boxnet-demo", "--description", "ag-box demo egress proxy",
                "--collect", "--quiet", "--no-block",
                "-p", "BindsTo=boxrun-demo.service", "-p", "After=boxrun-demo.service",
                "-p", "Restart=always", "-p", "RestartSec=200ms", "-p", "StartLimitIntervalSec=0",
                "-p", "MemoryMax=256M", "-p", "OOMPolicy=continue", "-p", "TimeoutStopSec=120s",
                "-p", "NoNewPrivileges=yes", "-p", "ProtectSystem=strict",
                "-p", "ProtectHome=read-only", "-p", "PrivateTmp=yes",
                "-p", "ProtectKernelTunables=yes", "-p", "ProtectKernelModules=yes",
                "-p", "ProtectKernelLogs=yes", "-p", "ProtectControlGroups=yes",
                "-p", "ProtectHostname=yes", "-p", "LockPersonality=yes",
                "-p", "RestrictRealtime=yes", "-p", "RestrictSUIDSGID=yes",
                "-p", "SystemCallArchitectures=native",
                "-p", "CapabilityBoundingSet=CAP_SYS_ADMIN",
                "-p", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK",
                "-p", "ReadWritePaths=/run/box/demo",
                "--",
                "/opt/box/bin/ag-box", "__proxy", "--box", "demo",
                "--netns", "/run/box/.netns/demo",
                "--run-dir", "/run/box/demo", "--node-list", "/etc/box/egress-allow.txt",
            ]
        );
        // A box whose proxy refreshes Claude Code's OAuth login may rewrite its node file, and
        // the broker's file of a login the box made itself.
        let mut oauth = BoxSpec {
            broker_held: vec!["claude-oauth"],
            ..spec.clone()
        };
        oauth.agent_home.logins = vec!["claude"];
        let argv = proxy_unit_argv(&oauth, &proxy);
        let tail: Vec<_> = argv.iter().skip_while(|a| *a != "ReadWritePaths=/run/box/demo").take(5).collect();
        assert_eq!(
            tail,
            [
                "ReadWritePaths=/run/box/demo", "-p", "ReadWritePaths=-/root/.claude",
                "-p", "ReadWritePaths=-/var/lib/ag-box/broker/boxes/demo",
            ]
        );
        // Not given claude: nothing of it.
        oauth.agent_home.logins = vec!["gh"];
        assert!(!proxy_unit_argv(&oauth, &proxy).iter().any(|a| a.contains(".claude") || a.contains("broker")));
    }

    #[test]
    fn memory_values() {
        for ok in ["1500M", "2G", "100", "50%", "100%", "infinity"] {
            assert!(valid_memory_max(ok), "{ok}");
        }
        for bad in [
            "", "M", "1.5G", "12MB", "-1", "lots", "0", "0G", "150%", "0%", "+5G",
        ] {
            assert!(!valid_memory_max(bad), "{bad}");
        }
        assert_eq!(memory_max_bytes("1500M"), Some(1500 << 20));
        assert_eq!(memory_max_bytes("2G"), Some(2 << 30));
        assert_eq!(memory_max_bytes("4096"), Some(4096));
        assert_eq!(memory_max_bytes("50%"), None);
        assert_eq!(memory_limit_bytes("75%", 8 << 30), Some(6 << 30));
        assert_eq!(memory_limit_bytes("2G", 8 << 30), Some(2 << 30));
        assert_eq!(memory_limit_bytes("infinity", 8 << 30), None);
    }
}
