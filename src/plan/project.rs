//! Which directories may be a box's project. A box's project is bound read-write into the box,
//! snapshotted and, on restore, moved aside and replaced: never the system, a home directory
//! itself, ag-box's own state, or a directory holding another box.

use std::path::Path;

/// Directories that are never a project, nor inside one's reach.
const SYSTEM: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var/tmp",
    "/var/run",
    "/var/lib/ag-box",
    "/opt/box",
    "/nix",
];
/// Directories that may hold projects, but are never one themselves.
const PARENTS: &[&str] = &[
    "/", "/home", "/root", "/srv", "/opt", "/var", "/var/lib", "/mnt", "/media",
];

/// An absolute path without `.`, `..` or control characters.
pub(crate) fn is_normal(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text == "/"
        || text.strip_prefix('/').is_some_and(|rest| {
            rest.split('/').all(|seg| !matches!(seg, "" | "." | ".."))
                && !text.chars().any(char::is_control)
        })
}

/// Why `path` cannot be a project on any node, if it cannot.
pub(crate) fn refusal(path: &Path) -> Option<String> {
    if !is_normal(path) {
        return Some("it must be an absolute path without '.', '..' or control characters".into());
    }
    if let Some(sys) = SYSTEM.iter().find(|s| path.starts_with(s)) {
        return Some(format!("{sys} belongs to the system or to ag-box"));
    }
    if PARENTS.iter().any(|p| path == Path::new(p)) {
        return Some("it holds other directories than one project's".into());
    }
    None
}

/// Why `path` cannot be a project on this node: the rules above, this node's home and state
/// dir, and the other boxes' projects (`(name, path)`).
pub(crate) fn refusal_here<'a>(
    path: &Path,
    home: &Path,
    state_dir: &Path,
    others: impl IntoIterator<Item = (&'a str, &'a Path)>,
) -> Option<String> {
    if is_normal(path) && home.starts_with(path) {
        return Some(format!(
            "it holds the home directory {} (~/.ssh, the agents' credentials, ag-box's config)",
            home.display()
        ));
    }
    if let Some(why) = refusal(path) {
        return Some(why);
    }
    if path.starts_with(state_dir) || state_dir.starts_with(path) {
        return Some(format!(
            "it overlaps ag-box's state dir {}",
            state_dir.display()
        ));
    }
    others.into_iter().find_map(|(name, other)| {
        (path.starts_with(other) || other.starts_with(path))
            .then(|| format!("it overlaps box '{name}' at {}", other.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn here(p: &str) -> Option<String> {
        refusal_here(
            Path::new(p),
            Path::new("/root"),
            Path::new("/var/lib/ag-box"),
            [("web", Path::new("/srv/web"))],
        )
    }

    #[test]
    fn projects_are_plain_directories_of_their_own() {
        for ok in [
            "/root/demo",
            "/home/alice/proj",
            "/srv/api",
            "/opt/work/x",
            "/var/www/site",
        ] {
            assert_eq!(here(ok), None, "{ok}");
        }
        for bad in [
            "/",
            "/root",
            "/home",
            "/etc",
            "/etc/nginx",
            "/usr/local/src",
            "/tmp/x",
            "/var/lib/ag-box/homes/x",
            "/srv",
            "/var",
            "/srv/web",
            "/srv/web/sub",
            "/proc/1",
            "/run/box",
        ] {
            assert!(here(bad).is_some(), "{bad}");
        }
        assert_eq!(
            here("/srv/web/sub"),
            Some("it overlaps box 'web' at /srv/web".into())
        );
        assert_eq!(
            refusal_here(Path::new("/home/a"), Path::new("/home/a"), Path::new("/var/lib/ag-box"), []),
            Some("it holds the home directory /home/a (~/.ssh, the agents' credentials, ag-box's config)".into())
        );
    }

    #[test]
    fn only_normal_absolute_paths() {
        assert!(is_normal(Path::new("/root/a b")));
        for bad in [
            "root/x",
            "/root/../etc",
            "/root/./x",
            "/root//x",
            "/root/x/",
            "/root/x\ny",
            "/root/\u{7f}",
        ] {
            assert!(!is_normal(Path::new(bad)), "{bad:?}");
            assert!(refusal(Path::new(bad)).is_some());
        }
    }
}
