//! How a box process tree is launched: the systemd-run argv and the anchor argv.

use std::path::{Path, PathBuf};

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

/// The transient service around the anchor.
pub fn systemd_run_argv(
    box_name: &str,
    memory_max: Option<&str>,
    home: &Path,
    anchor: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "systemd-run".into(),
        "--unit".into(),
        unit_name(box_name),
        "--description".into(),
        format!("ag-box {box_name}"),
        "--collect".into(),
        "--quiet".into(),
    ];
    if let Some(m) = memory_max {
        a.extend(["-p".into(), format!("MemoryMax={m}")]);
    }
    a.extend([
        "-p".into(),
        "OOMPolicy=continue".into(),
        "-E".into(),
        format!("HOME={}", home.display()),
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

    #[test]
    #[rustfmt::skip]
    fn systemd_run_wraps_the_anchor() {
        let anchor = anchor_argv(
            Path::new("/opt/box/bin/ag-box"), false, Path::new("/run/box/demo/info.json"),
            Path::new("/usr/bin/bwrap"), &["--unshare-pid".to_string()],
        );
        assert_eq!(
            systemd_run_argv("demo", Some("1500M"), Path::new("/root"), &anchor),
            [
                "systemd-run", "--unit", "boxrun-demo", "--description", "ag-box demo",
                "--collect", "--quiet", "-p", "MemoryMax=1500M", "-p", "OOMPolicy=continue",
                "-E", "HOME=/root", "--",
                "/opt/box/bin/ag-box", "__anchor", "--info", "/run/box/demo/info.json", "--",
                "/usr/bin/bwrap", "--unshare-pid",
            ]
        );
    }

    #[test]
    fn no_memory_max_means_no_property() {
        let argv = systemd_run_argv("x", None, Path::new("/root"), &["a".to_string()]);
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
