//! Facts about this machine.

use std::path::Path;

/// Merged-/usr hosts have /bin etc. as symlinks into /usr.
pub fn merged_usr() -> bool {
    Path::new("/bin").is_symlink()
}

/// systemd is PID 1 (the test for this that systemd itself documents).
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}
