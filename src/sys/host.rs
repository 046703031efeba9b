//! Facts about this machine.

use std::path::{Path, PathBuf};

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

/// This binary's path, for the box to run (`__become`) and systemd to start (`__anchor`).
/// A binary replaced while running (an install) shows as "<path> (deleted)": the new one at the
/// same path is meant.
pub fn own_exe() -> PathBuf {
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
