//! How a box process tree is launched: the systemd-run argv and the anchor argv.

use std::path::{Path, PathBuf};

use super::agent_home::Access;
use super::sandbox::BoxSpec;

/// The hidden subcommand that opens bwrap's info fd and runs (or supervises) bwrap.
pub const ANCHOR_SUBCOMMAND: &str = "__anchor";

pub fn unit_name(box_name: &str) -> String {
    format!("boxrun-{box_name}")
}

/// `ag-box __anchor [--supervise] --info <file> -- bwrap <args>`.
pub fn anchor_argv(
    exe: &Path,
    supervise: bool,
    info_file: &Path,
    bwrap: &Path,
    bwrap_args: &[String],
) -> Vec<String> {
    let mut a = vec![
        exe.to_string_lossy().into_owned(),
        ANCHOR_SUBCOMMAND.to_string(),
    ];
    if supervise {
        a.push("--supervise".into());
    }
    a.extend([
        "--info".into(),
        info_file.to_string_lossy().into_owned(),
        "--".into(),
        bwrap.to_string_lossy().into_owned(),
    ]);
    a.extend(bwrap_args.iter().cloned());
    a
}

/// systemd's own sandboxing of the unit, under bwrap's: what still lets bwrap build the box
/// (mounts, namespaces, the drop to the box user) and nothing more. `ProtectSystem=strict`
/// leaves writable only the paths the box writes (given as `ReadWritePaths`).
pub const HARDENING: &[&str] = &[
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

/// What a box writes on the host: its project, agent home, run dir and the shared credentials.
pub fn writable_paths(spec: &BoxSpec, exists: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
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

/// The transient service around the anchor.
pub fn systemd_run_argv(
    spec: &BoxSpec,
    memory_max: Option<&str>,
    writable: &[PathBuf],
    anchor: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "systemd-run".into(),
        "--unit".into(),
        unit_name(&spec.name),
        "--description".into(),
        format!("ag-box {}", spec.name),
        "--collect".into(),
        "--quiet".into(),
    ];
    if let Some(m) = memory_max {
        a.extend(["-p".into(), format!("MemoryMax={m}")]);
    }
    a.extend(["-p".into(), "OOMPolicy=continue".into()]);
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

/// Memory limits: a number with an optional K/M/G/T suffix, a percentage, or `infinity`.
pub fn valid_memory_max(v: &str) -> bool {
    if v == "infinity" {
        return true;
    }
    let digits = v.strip_suffix(['K', 'M', 'G', 'T', '%']).unwrap_or(v);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// Bytes for a cgroup limit file (direct runtime); None for percentages and infinity.
pub fn memory_max_bytes(v: &str) -> Option<u64> {
    let (digits, shift) = match v.chars().last()? {
        'K' => (&v[..v.len() - 1], 10),
        'M' => (&v[..v.len() - 1], 20),
        'G' => (&v[..v.len() - 1], 30),
        'T' => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// The direct runtime's memory cgroup for a box, below the given writable parent.
pub fn direct_cgroup(parent: &Path, box_name: &str) -> PathBuf {
    parent.join(format!("ag-box-{box_name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn spec() -> BoxSpec {
        BoxSpec::sample()
    }

    #[test]
    #[rustfmt::skip]
    fn systemd_run_wraps_the_anchor_in_a_hardened_unit() {
        let spec = spec();
        let anchor = anchor_argv(
            Path::new("/opt/box/bin/ag-box"), false, Path::new("/run/box/demo/info.json"),
            Path::new("/usr/bin/bwrap"), &["--unshare-pid".to_string()],
        );
        let present = ["/root/.claude/.credentials.json", "/root/.gitconfig"];
        let writable = writable_paths(&spec, |p| present.iter().any(|x| Path::new(x) == p));
        assert_eq!(
            systemd_run_argv(&spec, Some("1500M"), &writable, &anchor),
            [
                "systemd-run", "--unit", "boxrun-demo", "--description", "ag-box demo",
                "--collect", "--quiet", "-p", "MemoryMax=1500M", "-p", "OOMPolicy=continue",
                "-p", "NoNewPrivileges=yes", "-p", "ProtectSystem=strict", "-p", "PrivateTmp=yes",
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
    fn no_memory_max_means_no_property() {
        let argv = systemd_run_argv(&spec(), None, &[], &["a".to_string()]);
        assert!(!argv.iter().any(|a| a.starts_with("MemoryMax")));
    }

    #[test]
    fn supervised_anchor() {
        assert_eq!(
            anchor_argv(
                Path::new("/x/ag-box"),
                true,
                Path::new("/i"),
                Path::new("/b"),
                &[]
            ),
            [
                "/x/ag-box",
                "__anchor",
                "--supervise",
                "--info",
                "/i",
                "--",
                "/b"
            ]
        );
    }

    #[test]
    fn memory_values() {
        for ok in ["1500M", "2G", "100", "50%", "infinity"] {
            assert!(valid_memory_max(ok), "{ok}");
        }
        for bad in ["", "M", "1.5G", "12MB", "-1", "lots"] {
            assert!(!valid_memory_max(bad), "{bad}");
        }
        assert_eq!(memory_max_bytes("1500M"), Some(1500 << 20));
        assert_eq!(memory_max_bytes("2G"), Some(2 << 30));
        assert_eq!(memory_max_bytes("4096"), Some(4096));
        assert_eq!(memory_max_bytes("50%"), None);
    }
}
