//! Facts about this machine.

use std::path::{Path, PathBuf};

/// Merged-/usr hosts have /bin etc. as symlinks into /usr.
pub(crate) fn merged_usr() -> bool {
    Path::new("/bin").is_symlink()
}

/// The GPU device nodes in `dev` (`nvidia*`, `dri`, `kfd`; links not followed) and the
/// groups other than root's that own them or, in a dir, their entries.
pub(crate) fn gpu(dev: &Path) -> crate::plan::sandbox::Gpu {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut gpu = crate::plan::sandbox::Gpu::default();
    let Ok(entries) = std::fs::read_dir(dev) else {
        return gpu;
    };
    let mut names: Vec<String> = entries
        .filter_map(std::result::Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("nvidia") || n == "dri" || n == "kfd")
        .collect();
    names.sort();
    let mut group_of = |path: &Path| {
        if let Ok(m) = std::fs::symlink_metadata(path)
            && m.gid() != 0
            && !gpu.groups.contains(&m.gid())
        {
            gpu.groups.push(m.gid());
        }
    };
    for name in &names {
        let path = dev.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                group_of(&inner.path());
            }
        } else if !meta.file_type().is_char_device() {
            continue;
        }
        group_of(&path);
        gpu.devices.push(path);
    }
    gpu
}

/// systemd is PID 1 (the test for this that systemd itself documents).
pub(crate) fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Fill `bytes` from the kernel's random source.
pub(crate) fn random_bytes(bytes: &mut [u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, bytes))
        .context("reading /dev/urandom")
}

pub(crate) fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// Colour on stderr: a terminal that can show it, and no `NO_COLOR` (no-color.org).
pub(crate) fn colour_on_stderr() -> bool {
    stderr_is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// A line to stderr, escaped (what `say!` writes). A closed stderr (a dropped ssh connection)
/// must not stop a command half-way, so a failed write is ignored.
pub(crate) fn say_line(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{}", crate::plan::text::escaped(line));
}

static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `-q`: ag-box's own messages (not its errors and warnings) are left unsaid.
pub(crate) fn set_quiet() {
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// This binary's path, for the box to run (`__become`) and systemd to start (`__anchor`).
/// A binary replaced while running (an install) shows as "<path> (deleted)": the new one at the
/// same path is meant.
pub(crate) fn own_exe() -> PathBuf {
    match std::env::current_exe() {
        Ok(p) => {
            let text = p.to_string_lossy();
            match text.strip_suffix(" (deleted)") {
                Some(live) => PathBuf::from(live),
                None => p,
            }
        }
        Err(_) => PathBuf::from("/usr/local/bin/ag-box"),
    }
}

/// `path` is where a filesystem is mounted (so it cannot be renamed; its contents can).
pub(crate) fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(&unescape_mount(m)) == path)
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            if let Ok(b) = u8::from_str_radix(&code, 8) {
                out.push(char::from(b));
            } else {
                out.push('\\');
                out.push_str(&code);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Bytes of memory this node has (`MemTotal`), 0 when unknown.
pub(crate) fn mem_total() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

/// This node has an account (a user or a group) with id `id`: no box may run as it.
pub(crate) fn has_account(id: u32) -> bool {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(id));
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(id));
    // An unreadable account database counts as holding it: pick another.
    !matches!((user, group), (Ok(None), Ok(None)))
}

/// Log lines to stderr with what the box may have put in them escaped (the formatter writes
/// each line whole, in one call).
pub(crate) struct EscapedStderr;

impl std::io::Write for EscapedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = crate::plan::text::terminal_line(&String::from_utf8_lossy(buf));
        std::io::stderr().write_all(line.as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// What a process of ag-box's own (a unit's, a refresher's) needs to read this node's config,
/// and find its tools (restic above all: the one that parked the box), as this command does.
pub(crate) fn config_env() -> Vec<(&'static str, String)> {
    set_of(&["HOME", "BOX_CONFIG_DIR", "BOX_STATE_DIR", "PATH"])
}

/// Those of `keys` set in this command's environment, with their values.
pub(crate) fn set_of(keys: &[&'static str]) -> Vec<(&'static str, String)> {
    keys.iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mount("/root/my\\040proj"), "/root/my proj");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert!(is_mount_point(Path::new("/proc")));
        assert!(!is_mount_point(Path::new("/proc/self")));
    }

    #[test]
    fn gpu_device_nodes_and_their_groups_are_found_links_and_files_are_not() {
        let dev = tempfile::tempdir().unwrap();
        let d = dev.path();
        let null = makedev(1, 3);
        let node = |p: &Path, gid: u32| {
            mknod(p, SFlag::S_IFCHR, Mode::from_bits_truncate(0o660), null).unwrap();
            std::os::unix::fs::chown(p, None, Some(gid)).unwrap();
        };
        node(&d.join("nvidia0"), 0);
        node(&d.join("nvidiactl"), 0);
        std::fs::create_dir(d.join("dri")).unwrap();
        std::fs::set_permissions(d.join("dri"), std::fs::Permissions::from_mode(0o755)).unwrap();
        node(&d.join("dri/renderD128"), 44);
        node(&d.join("kfd"), 45);
        std::fs::write(d.join("nvidia-not-a-device"), "x").unwrap();
        std::os::unix::fs::symlink("/dev/null", d.join("nvidia-link")).unwrap();
        node(&d.join("sda"), 6);
        let found = gpu(d);
        assert_eq!(
            found,
            crate::plan::sandbox::Gpu {
                devices: vec![
                    d.join("dri"),
                    d.join("kfd"),
                    d.join("nvidia0"),
                    d.join("nvidiactl")
                ],
                groups: vec![44, 45],
            }
        );
        assert_eq!(gpu(&d.join("none")), crate::plan::sandbox::Gpu::default());
    }
}
