//! The box's filesystem view and the bwrap argv that builds it (DESIGN.md "The box").

use std::path::{Path, PathBuf};

use super::slices;

/// What a box is made of, as seen from the host.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxSpec {
    pub name: String,
    pub project: PathBuf,
    pub home: PathBuf,
    /// `/run/box/<name>`: tmux socket, tmux config, bwrap info file.
    pub run_dir: PathBuf,
    /// Debian 12 and most current distros: /bin, /lib... are symlinks into /usr.
    pub merged_usr: bool,
    pub tmux_bin: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    RoBind(PathBuf),
    RoBindTry(PathBuf),
    Bind(PathBuf),
    Symlink { target: String, link: PathBuf },
    Tmpfs(PathBuf),
    Proc,
    Dev,
}

impl BoxSpec {
    pub fn socket(&self) -> PathBuf {
        self.run_dir.join("tmux.sock")
    }
    pub fn tmux_conf(&self) -> PathBuf {
        self.run_dir.join("tmux.conf")
    }
    pub fn info_file(&self) -> PathBuf {
        self.run_dir.join("info.json")
    }
    fn claude(&self, rel: &str) -> PathBuf {
        self.home.join(".claude").join(rel)
    }

    /// Read-write directories the box needs even when they do not exist yet.
    pub fn rw_dirs_to_create(&self) -> Vec<PathBuf> {
        vec![
            slices::claude_project_dir(&self.home, &self.project),
            self.home.join(".codex"),
            self.home.join(".grok"),
            self.run_dir.clone(),
        ]
    }

    /// The mount plan; optional sources for which `exists` is false are left out.
    pub fn mounts(&self, exists: impl Fn(&Path) -> bool) -> Vec<Mount> {
        let mut m = vec![
            Mount::Proc,
            Mount::Dev,
            Mount::Tmpfs("/tmp".into()),
            Mount::RoBind("/usr".into()),
        ];
        for dir in ["bin", "sbin", "lib", "lib64"] {
            let host = PathBuf::from("/").join(dir);
            if self.merged_usr {
                if exists(&host) {
                    m.push(Mount::Symlink {
                        target: format!("usr/{dir}"),
                        link: host,
                    });
                }
            } else {
                m.push(Mount::RoBindTry(host));
            }
        }
        m.push(Mount::RoBind("/etc".into()));
        m.push(Mount::RoBindTry("/nix".into()));
        m.push(Mount::Tmpfs(self.home.clone()));
        let read_only = [
            self.claude("CLAUDE.md"),
            self.claude("settings.json"),
            self.claude("output-styles"),
            self.claude("skills"),
            self.claude("plugins"),
            self.home.join(".gitconfig"),
            self.home.join(".config/gh"),
            self.home.join(".local"),
        ];
        m.extend(
            read_only
                .into_iter()
                .filter(|p| exists(p))
                .map(Mount::RoBind),
        );
        let optional_rw = [
            self.claude(".credentials.json"),
            self.home.join(".claude.json"),
        ];
        m.extend(
            optional_rw
                .into_iter()
                .filter(|p| exists(p))
                .map(Mount::Bind),
        );
        m.extend(
            self.rw_dirs_to_create()
                .into_iter()
                .filter(|p| p != &self.run_dir)
                .map(Mount::Bind),
        );
        m.push(Mount::Bind(self.project.clone()));
        m.push(Mount::Bind(self.run_dir.clone()));
        m
    }

    /// Environment of every process in the box: the tmux server, attach and exec alike.
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.home.display();
        let path = format!(
            "{home}/.local/bin:{home}/.nix-profile/bin:/nix/var/nix/profiles/default/bin:\
             /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        [
            ("HOME", home.to_string()),
            ("PATH", path),
            ("SHELL", "/bin/bash".to_string()),
            ("TERM", "xterm-256color".to_string()),
            ("LANG", "C.UTF-8".to_string()),
            ("BOX_NAME", self.name.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// bwrap's arguments (without the program name); its child is the foreground tmux server.
    pub fn bwrap_args(&self, mounts: &[Mount], info_fd: i32) -> Vec<String> {
        let mut a: Vec<String> = [
            "--unshare-pid",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]
        .map(String::from)
        .to_vec();
        a.extend(["--info-fd".to_string(), info_fd.to_string()]);
        for mount in mounts {
            match mount {
                Mount::Proc => a.extend(["--proc".into(), "/proc".into()]),
                Mount::Dev => a.extend(["--dev".into(), "/dev".into()]),
                Mount::Tmpfs(p) => a.extend(["--tmpfs".into(), s(p)]),
                Mount::RoBind(p) => a.extend(["--ro-bind".into(), s(p), s(p)]),
                Mount::RoBindTry(p) => a.extend(["--ro-bind-try".into(), s(p), s(p)]),
                Mount::Bind(p) => a.extend(["--bind".into(), s(p), s(p)]),
                Mount::Symlink { target, link } => {
                    a.extend(["--symlink".into(), target.clone(), s(link)])
                }
            }
        }
        for (k, v) in self.env() {
            a.extend(["--setenv".into(), k, v]);
        }
        a.extend(["--chdir".into(), s(&self.project), "--".into()]);
        a.extend([
            s(&self.tmux_bin),
            "-D".into(),
            "-S".into(),
            s(&self.socket()),
            "-f".into(),
            s(&self.tmux_conf()),
        ]);
        a
    }

    /// Where `exec` starts: the caller's directory when it lies inside the project.
    pub fn exec_dir(&self, caller_cwd: Option<&Path>) -> PathBuf {
        match caller_cwd {
            Some(cwd) if cwd.starts_with(&self.project) => cwd.to_path_buf(),
            _ => self.project.clone(),
        }
    }
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn spec() -> BoxSpec {
        BoxSpec {
            name: "demo".into(),
            project: "/root/demo".into(),
            home: "/root".into(),
            run_dir: "/run/box/demo".into(),
            merged_usr: true,
            tmux_bin: "/usr/bin/tmux".into(),
        }
    }

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    #[rustfmt::skip]
    fn minimal_host_bwrap_argv() {
        // A host with no agent files at all, no /lib64.
        let spec = spec();
        let present = ["/bin", "/sbin", "/lib"];
        let mounts = spec.mounts(|p| present.iter().any(|x| Path::new(x) == p));
        assert_eq!(
            spec.bwrap_args(&mounts, 3),
            v(&[
                "--unshare-pid", "--die-with-parent", "--new-session", "--clearenv",
                "--info-fd", "3",
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                "--ro-bind", "/usr", "/usr",
                "--symlink", "usr/bin", "/bin",
                "--symlink", "usr/sbin", "/sbin",
                "--symlink", "usr/lib", "/lib",
                "--ro-bind", "/etc", "/etc",
                "--ro-bind-try", "/nix", "/nix",
                "--tmpfs", "/root",
                "--bind", "/root/.claude/projects/-root-demo", "/root/.claude/projects/-root-demo",
                "--bind", "/root/.codex", "/root/.codex",
                "--bind", "/root/.grok", "/root/.grok",
                "--bind", "/root/demo", "/root/demo",
                "--bind", "/run/box/demo", "/run/box/demo",
                "--setenv", "HOME", "/root",
                "--setenv", "PATH", "/root/.local/bin:/root/.nix-profile/bin:/nix/var/nix/profiles/default/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--setenv", "SHELL", "/bin/bash",
                "--setenv", "TERM", "xterm-256color",
                "--setenv", "LANG", "C.UTF-8",
                "--setenv", "BOX_NAME", "demo",
                "--chdir", "/root/demo", "--",
                "/usr/bin/tmux", "-D", "-S", "/run/box/demo/tmux.sock", "-f", "/run/box/demo/tmux.conf",
            ])
        );
    }

    #[test]
    fn agent_files_present_are_bound_with_their_modes() {
        let spec = spec();
        let mounts = spec.mounts(|_| true);
        let tail: Vec<Mount> = mounts
            .into_iter()
            .skip_while(|m| m != &Mount::Tmpfs("/root".into()))
            .collect();
        let ro = |p: &str| Mount::RoBind(p.into());
        let rw = |p: &str| Mount::Bind(p.into());
        assert_eq!(
            tail,
            vec![
                Mount::Tmpfs("/root".into()),
                ro("/root/.claude/CLAUDE.md"),
                ro("/root/.claude/settings.json"),
                ro("/root/.claude/output-styles"),
                ro("/root/.claude/skills"),
                ro("/root/.claude/plugins"),
                ro("/root/.gitconfig"),
                ro("/root/.config/gh"),
                ro("/root/.local"),
                rw("/root/.claude/.credentials.json"),
                rw("/root/.claude.json"),
                rw("/root/.claude/projects/-root-demo"),
                rw("/root/.codex"),
                rw("/root/.grok"),
                rw("/root/demo"),
                rw("/run/box/demo"),
            ]
        );
    }

    #[test]
    fn split_usr_hosts_bind_the_top_level_dirs() {
        let spec = BoxSpec {
            merged_usr: false,
            ..spec()
        };
        let mounts = spec.mounts(|_| false);
        assert_eq!(
            mounts[4..8].to_vec(),
            ["/bin", "/sbin", "/lib", "/lib64"]
                .map(|p| Mount::RoBindTry(p.into()))
                .to_vec()
        );
    }

    #[test]
    fn ssh_and_other_projects_never_appear() {
        let spec = spec();
        let args = spec.bwrap_args(&spec.mounts(|_| true), 3).join(" ");
        assert!(!args.contains(".ssh"));
        assert!(!args.contains("/srv"));
        assert!(!args.contains("--bind /root /root"));
    }

    #[test]
    fn exec_dir_stays_inside_the_project() {
        let spec = spec();
        assert_eq!(
            spec.exec_dir(Some(Path::new("/root/demo/src"))),
            PathBuf::from("/root/demo/src")
        );
        assert_eq!(
            spec.exec_dir(Some(Path::new("/root/demo2"))),
            PathBuf::from("/root/demo")
        );
        assert_eq!(
            spec.exec_dir(Some(Path::new("/etc"))),
            PathBuf::from("/root/demo")
        );
        assert_eq!(spec.exec_dir(None), PathBuf::from("/root/demo"));
    }
}
