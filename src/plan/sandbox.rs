//! The box's filesystem view, the bwrap argv that builds it, and the argvs that run inside it
//! (docs/design.md "The box").
//!
//! bwrap is started by root without a user namespace; its child is `ag-box __become`, which
//! drops to the box user (no capabilities, `no_new_privs`) before anything of the box runs.
//! Mount order, and why:
//! 1. `/proc`, `/dev`, a private `/tmp`, then the host's `/usr` (+ the merged-/usr symlinks),
//!    `/etc` and `/nix`, read-only: the system is never writable from inside.
//! 2. The box's own `/etc/passwd` and `/etc/group` over the host's, read-only: `id` names the
//!    box user, and the host's accounts stay unlisted.
//! 3. A tmpfs HOME (handed to the box user by `__become`), then the HOME binds of
//!    [`AgentHome::binds`], parents before children: the box's own agent dirs, the node's
//!    credentials (read-write) and global config (read-only). The node's files are bound with
//!    `-try`: the operator's tools rewrite them at any time, and one gone at that instant should
//!    leave the box without it rather than fail its start.
//! 4. The project, read-write.
//! 5. The box's socket dir (the only part of the run dir the box can write), the tmux config
//!    and the ag-box binary, read-only. bwrap's info and the pids ag-box reads back stay in the
//!    root-only run dir on the host, out of the box's reach.
//!
//! A bind's missing parents on a tmpfs are made with `--dir` (mode 0755) first: bwrap would
//! make them 0700 root's, which the box user could not pass.

use std::path::{Path, PathBuf};

/// The descriptor on which bwrap writes its info (the sandbox's pid): the anchor makes it so
/// before it starts bwrap (`sys::runtime`).
pub(crate) const INFO_FD: i32 = 3;

use super::account::{self, Ids};
use super::agent_home::{Access, AgentHome};
use super::agents;
use super::attention::{MANAGED, Managed};
use super::box_exe::BOX_EXE;
use super::broker;
use super::egress::{self, BoxPolicy};
use super::tmux;

/// Where boxes' network namespaces are pinned (no box name starts with a dot).
pub(crate) const NETNS_DIR: &str = "/run/box/.netns";

/// What a box is made of, as seen from the host.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoxSpec {
    pub name: String,
    pub project: PathBuf,
    pub agent_home: AgentHome,
    /// `/run/box/<name>`: root's alone, but for its `sock/` dir.
    pub run_dir: PathBuf,
    /// Debian 12 and most current distros: /bin, /lib... are symlinks into /usr.
    pub merged_usr: bool,
    pub tmux_bin: PathBuf,
    /// This ag-box binary on the host, bound read-only at [`BOX_EXE`].
    pub exe: PathBuf,
    pub ids: Ids,
    /// Processes and threads the box may have at once.
    pub tasks_max: u64,
    /// Bytes its `/tmp` and its HOME may each hold.
    pub tmpfs_max: u64,
    /// The record's network policy (the mode decides the namespace; the proxy reads the rest).
    pub egress: BoxPolicy,
    /// What the `main` tmux window runs as the box starts.
    pub main: MainWindow,
    /// This node's CA for the credential broker (`$BOX_STATE_DIR/ca`).
    pub node_ca: PathBuf,
    /// `gpu=true`: the node's GPU device nodes, as found when the box starts.
    pub gpu: Option<Gpu>,
    /// The brokered logins whose files on the node hold a token the broker stands in for
    /// (`plan::broker::RULES`).
    pub broker_held: Vec<&'static str>,
    /// The node shares its store with other nodes (S3): an OAuth login is refreshed under the
    /// store's account lease (`ag-box __refresh`), not by the box's proxy alone.
    pub shared_store: bool,
    /// `$BOX_STATE_DIR/broker`: where the broker keeps an OAuth login a box made itself.
    pub broker_state: PathBuf,
}

/// The node's GPU device nodes (`/dev/nvidia*`, `/dev/dri`, `/dev/kfd`) and the groups that
/// own them (`video`, `render`), which a box's processes join to use them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Gpu {
    pub devices: Vec<PathBuf>,
    pub groups: Vec<u32>,
}

/// An empty dir in every box where the node's cgroup tree would be.
const CGROUP_DIR: &str = "/sys/fs/cgroup";

/// What of `/sys` a GPU's userspace reads (the devices, their PCI bus, the DRM class), shown
/// read-only to a `gpu=true` box alone.
pub(crate) const GPU_SYS: &[&str] = &[
    "/sys/devices",
    "/sys/bus/pci",
    "/sys/class/drm",
    "/sys/module",
];

/// The system's CA bundle (Debian's path), which a box whose proxy stands in for a login sees
/// with the node's CA added, and every TLS client in it is pointed at.
pub(crate) const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What a box's `main` tmux window runs as the box starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MainWindow {
    /// The box's shell (`agent=none`).
    Shell,
    /// The agent (one of `agents::AGENTS`), back in the project's most recent conversation, or
    /// in a new one (`up --fresh`); the box's shell once it exits.
    Agent { name: &'static str, fresh: bool },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mount {
    Proc,
    Dev,
    /// The private `/tmp`: a tmpfs anyone in the box may write (mode 1777).
    Tmp,
    /// The box's own `/dev/shm` (POSIX shared memory: browsers, container tools), as `/tmp`.
    Shm,
    Tmpfs(PathBuf),
    Dir(PathBuf),
    Symlink {
        target: String,
        link: PathBuf,
    },
    RoBind {
        src: PathBuf,
        dest: PathBuf,
    },
    RoBindTry(PathBuf),
    Bind {
        src: PathBuf,
        dest: PathBuf,
    },
    /// A node file the box shares: skipped by bwrap if it is gone by then.
    BindTry(PathBuf),
    /// A device node (or a dir of them) of the node, usable in the box.
    DevBind(PathBuf),
    /// A host-describing `/proc` file shown empty (`/dev/null` over it).
    MaskFile(PathBuf),
    /// A host-describing `/proc` dir shown empty (a read-only tmpfs over it).
    MaskDir(PathBuf),
}

/// What Docker masks in `/proc` (the host's disks, keys, timers, devices), and the partitions.
pub(crate) const MASKED_PROC_FILES: &[&str] = &[
    "/proc/partitions",
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/interrupts",
];
pub(crate) const MASKED_PROC_DIRS: &[&str] = &["/proc/acpi", "/proc/asound", "/proc/scsi"];

impl Mount {
    fn dest(&self) -> PathBuf {
        match self {
            Mount::Proc => "/proc".into(),
            Mount::Dev => "/dev".into(),
            Mount::Tmp => "/tmp".into(),
            Mount::Shm => "/dev/shm".into(),
            Mount::Tmpfs(p)
            | Mount::Dir(p)
            | Mount::RoBindTry(p)
            | Mount::BindTry(p)
            | Mount::DevBind(p)
            | Mount::MaskFile(p)
            | Mount::MaskDir(p) => p.clone(),
            Mount::Symlink { link, .. } => link.clone(),
            Mount::RoBind { dest, .. } | Mount::Bind { dest, .. } => dest.clone(),
        }
    }

    /// bwrap makes what lies below this itself (a tmpfs, or a dir on one).
    fn is_made_by_bwrap(&self) -> bool {
        matches!(
            self,
            Mount::Tmp | Mount::Shm | Mount::Tmpfs(_) | Mount::Dir(_)
        )
    }

    fn same(p: &Path) -> Mount {
        Mount::RoBind {
            src: p.to_path_buf(),
            dest: p.to_path_buf(),
        }
    }
}

/// How `ag-box __become` runs a command inside a box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Become {
    pub ids: Ids,
    /// Supplementary groups (the client's: the box group, for the socket).
    pub groups: Vec<u32>,
    /// A tmpfs handed to `ids` before the drop (the box's HOME).
    pub own_home: Option<PathBuf>,
    /// Supervise the command (the box's tmux server) and, once this socket appears, make it
    /// reachable by the box group and have the server load its config.
    pub share_socket: Option<PathBuf>,
    /// `RLIMIT_NPROC` of `ids`: with a uid of its own per box, a bound on the box's processes.
    pub tasks: Option<u64>,
    pub chdir: Option<PathBuf>,
}

impl Become {
    pub(crate) fn argv(&self, command: &[String]) -> Vec<String> {
        let mut a = vec![
            BOX_EXE.to_string(),
            "__become".into(),
            "--uid".into(),
            self.ids.uid.to_string(),
            "--gid".into(),
            self.ids.gid.to_string(),
        ];
        for g in &self.groups {
            a.extend(["--group".into(), g.to_string()]);
        }
        if let Some(n) = self.tasks {
            a.extend(["--tasks".into(), n.to_string()]);
        }
        for (flag, path) in [
            ("--own-home", &self.own_home),
            ("--share-socket", &self.share_socket),
            ("--chdir", &self.chdir),
        ] {
            if let Some(p) = path {
                a.extend([flag.to_string(), s(p)]);
            }
        }
        a.push("--".into());
        a.extend(command.iter().cloned());
        a
    }
}

impl BoxSpec {
    /// The box `demo` at `/root/demo`, for tests.
    #[cfg(test)]
    pub(crate) fn sample() -> BoxSpec {
        BoxSpec {
            name: "demo".into(),
            project: "/root/demo".into(),
            agent_home: AgentHome {
                home: "/root".into(),
                root: "/var/lib/ag-box/homes/demo".into(),
                logins: super::agent_home::logins_for(None, None),
            },
            run_dir: "/run/box/demo".into(),
            merged_usr: true,
            tmux_bin: "/usr/bin/tmux".into(),
            exe: "/opt/box/bin/ag-box".into(),
            ids: Ids {
                uid: 1000,
                gid: 1000,
            },
            tasks_max: 4096,
            tmpfs_max: 2 << 30,
            egress: BoxPolicy {
                mode: egress::Mode::Allow,
                allow: vec![],
            },
            main: MainWindow::Shell,
            node_ca: "/var/lib/ag-box/ca".into(),
            gpu: None,
            broker_held: vec!["gh"],
            shared_store: false,
            broker_state: "/var/lib/ag-box/broker".into(),
        }
    }

    /// The shell command the `main` window starts with (None: the box's shell, as any window).
    /// The agent runs through ag-box inside the box, as the box user, which finds the
    /// conversation to resume; the window's shell takes over when the agent exits. `nix`: both
    /// in the base flake's dev shell, as the box's other shells are.
    pub(crate) fn main_command(&self, nix: bool) -> Option<String> {
        let MainWindow::Agent { name, fresh } = self.main else {
            return None;
        };
        let fresh = if fresh { " --fresh" } else { "" };
        let agent = format!("{BOX_EXE} __agent {name}{fresh}");
        Some(if nix {
            format!(
                "exec nix develop {} --command bash -c '{agent}; exec bash'",
                tmux::BASE_FLAKE
            )
        } else {
            format!("{agent}; exec bash -l")
        })
    }

    /// The agent whose state the `main` window's terminal tells, for an agent without signals
    /// of its own that ag-box hears.
    pub(crate) fn monitored_agent(&self) -> Option<&'static str> {
        let MainWindow::Agent { name, .. } = self.main else {
            return None;
        };
        agents::named(name)
            .filter(|a| a.signals == agents::Signals::Terminal)
            .map(|a| a.name)
    }

    /// The box's local copy on this node: its project and its agent home.
    pub(crate) fn local_copy(&self) -> Vec<PathBuf> {
        vec![self.project.clone(), self.agent_home.root.clone()]
    }
    pub(crate) fn home(&self) -> &Path {
        &self.agent_home.home
    }
    pub(crate) fn socket_dir(&self) -> PathBuf {
        self.run_dir.join("sock")
    }
    pub(crate) fn socket(&self) -> PathBuf {
        self.socket_dir().join("tmux.sock")
    }
    pub(crate) fn tmux_conf(&self) -> PathBuf {
        self.run_dir.join("tmux.conf")
    }
    pub(crate) fn info_file(&self) -> PathBuf {
        self.run_dir.join("info.json")
    }
    pub(crate) fn passwd_file(&self) -> PathBuf {
        self.run_dir.join("passwd")
    }
    pub(crate) fn group_file(&self) -> PathBuf {
        self.run_dir.join("group")
    }
    /// An agent's managed settings as the box sees them (`sys::attention`).
    pub(crate) fn managed_dir(&self, managed: &Managed) -> PathBuf {
        self.run_dir.join(managed.run_name)
    }
    /// The bound on tasks the box started with, for `exec` to hold its commands to.
    pub(crate) fn tasks_file(&self) -> PathBuf {
        self.run_dir.join("tasks_max")
    }
    /// Where the box's own network namespace is pinned: a dir only ag-box mounts in (another
    /// tool's `ip netns add` bind-mounts `/run/netns` over itself, which hid pins made there
    /// before and left them impossible to remove).
    pub(crate) fn netns_pin(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }
    /// Where ag-box versions before pinned it, released at a stop.
    pub(crate) fn legacy_netns_pin(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/box-{}", self.name))
    }
    /// The box's own network namespace; None: it uses the host's.
    pub(crate) fn netns(&self) -> Option<PathBuf> {
        self.egress.mode.isolated().then(|| self.netns_pin())
    }
    /// The logins this box's proxy stands in for (`plan::broker`).
    pub(crate) fn broker_rules(&self) -> Vec<broker::Rule> {
        broker::rules_for(
            &self.agent_home.logins,
            self.egress.mode.isolated(),
            &self.broker_held,
        )
    }
    /// What the box sees of the broker (read-only): login copies and the CA bundle.
    pub(crate) fn broker_dir(&self) -> PathBuf {
        self.run_dir.join("broker")
    }
    /// The copy the box sees of the files of the broker's row `name` (`plan::broker::RULES`).
    pub(crate) fn broker_copy(&self, name: &str) -> PathBuf {
        self.broker_dir().join(name)
    }
    /// The node's dirs of the OAuth logins this box's proxy refreshes (it writes their files).
    pub(crate) fn broker_oauth_dirs(&self) -> Vec<PathBuf> {
        let rules = self.broker_rules();
        let mut dirs: Vec<PathBuf> = broker::RULES
            .iter()
            .filter(|r| {
                r.oauth.is_some()
                    && self.broker_held.contains(&r.name)
                    && rules.iter().any(|k| k.login == r.login)
            })
            .filter_map(|r| {
                self.agent_home
                    .home
                    .join(r.copied)
                    .parent()
                    .map(Path::to_path_buf)
            })
            .collect();
        // And where the broker keeps a login the box made itself.
        if !dirs.is_empty() {
            dirs.push(self.box_logins());
        }
        dirs
    }
    /// The node's brokered files the box sees as copies (`broker::copies_seen`): where each
    /// is, its copy, and whether the box may write it (an OAuth login's: its CLI saves what a
    /// refresh or a login through the broker answered, placeholders, into its own copy).
    fn broker_copies(&self) -> Vec<(PathBuf, PathBuf, bool)> {
        self.copied_rows()
            .into_iter()
            .map(|r| {
                (
                    self.agent_home.home.join(r.copied),
                    self.broker_copy(r.name),
                    r.oauth.is_some(),
                )
            })
            .collect()
    }
    fn copied_rows(&self) -> Vec<&'static broker::LoginRule> {
        broker::copies_seen(
            &self.agent_home.logins,
            self.egress.mode.isolated(),
            &self.broker_held,
            super::agent_home::is_login_file,
        )
    }
    /// Where in HOME the box's copies are files of its own agent home, written by the start
    /// (`LoginRule::copy_in_home`), never binds.
    fn copies_in_home(&self) -> Vec<PathBuf> {
        self.copied_rows()
            .into_iter()
            .filter(|r| r.copy_in_home())
            .map(|r| self.agent_home.home.join(r.copied))
            .collect()
    }
    /// Where in HOME the box sees the broker's copies of OAuth logins, whether or not the node
    /// has the file (mount points the start makes in the box's own agent home, relative to
    /// HOME).
    pub(crate) fn broker_copy_points(&self) -> Vec<PathBuf> {
        self.broker_copies()
            .into_iter()
            .filter(|(_, _, writable)| *writable)
            .filter_map(|(dest, _, _)| {
                dest.strip_prefix(&self.agent_home.home)
                    .ok()
                    .map(Path::to_path_buf)
            })
            .collect()
    }
    /// Where the broker keeps the OAuth logins this box made itself (root's alone).
    pub(crate) fn box_logins(&self) -> PathBuf {
        broker::box_logins_dir(&self.broker_state, &self.name)
    }
    /// There while the box's agent home holds the broker's copy of row `name` as a file of its
    /// own (`LoginRule::copy_in_home`): what the box writes there then is never its login.
    pub(crate) fn in_home_mark(&self, name: &str) -> PathBuf {
        self.box_logins().join(format!("{name}.in-home"))
    }
    /// Whether the box sees the broker's copy where the node's file `node_file` would be.
    pub(crate) fn sees_broker_copy(&self, node_file: &Path) -> bool {
        self.broker_copies()
            .iter()
            .any(|(dest, _, _)| dest == node_file)
    }
    pub(crate) fn ca_bundle(&self) -> PathBuf {
        self.broker_dir().join("ca-bundle.pem")
    }
    /// What the proxy reads (root's alone): the tokens, rules and certificate.
    pub(crate) fn broker_file(&self) -> PathBuf {
        broker::file(&self.run_dir)
    }
    pub(crate) fn egress_policy_file(&self) -> PathBuf {
        egress::policy_file(&self.run_dir)
    }
    pub(crate) fn egress_log(&self) -> PathBuf {
        egress::log_file(&self.run_dir)
    }

    /// The mount plan; shared HOME files (and `/proc` entries to mask) for which `exists` is
    /// false are left out.
    pub(crate) fn mounts(&self, exists: impl Fn(&Path) -> bool) -> Vec<Mount> {
        let mut m = vec![Mount::Proc];
        let present = |list: &'static [&'static str]| {
            list.iter()
                .map(PathBuf::from)
                .filter(|p| exists(p))
                .collect::<Vec<_>>()
        };
        m.extend(present(MASKED_PROC_FILES).into_iter().map(Mount::MaskFile));
        m.extend(present(MASKED_PROC_DIRS).into_iter().map(Mount::MaskDir));
        m.extend([Mount::Dev, Mount::Shm]);
        if let Some(gpu) = &self.gpu {
            m.extend(gpu.devices.iter().cloned().map(Mount::DevBind));
        }
        m.extend([Mount::Tmp, Mount::same(Path::new("/usr"))]);
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
        m.push(Mount::same(Path::new("/etc")));
        m.push(Mount::RoBindTry("/nix".into()));
        if self.gpu.is_some() {
            m.extend(GPU_SYS.iter().map(|p| Mount::RoBindTry(p.into())));
        }
        // Empty: container tools (rootless podman) look for it, and find no cgroup of the node.
        m.push(Mount::Dir(CGROUP_DIR.into()));
        m.push(Mount::RoBind {
            src: self.passwd_file(),
            dest: "/etc/passwd".into(),
        });
        m.push(Mount::RoBind {
            src: self.group_file(),
            dest: "/etc/group".into(),
        });
        let brokered = self.broker_rules();
        if !brokered.is_empty() {
            m.push(Mount::RoBind {
                src: self.ca_bundle(),
                dest: broker::BOX_CA_BUNDLE.into(),
            });
            // For the clients that read the system's bundle whatever the environment says.
            if exists(Path::new(SYSTEM_CA_BUNDLE)) {
                m.push(Mount::RoBind {
                    src: self.ca_bundle(),
                    dest: SYSTEM_CA_BUNDLE.into(),
                });
            }
        }
        // Over the node's dirs, which the start makes when the node has none.
        m.extend(MANAGED.iter().map(|managed| Mount::RoBind {
            src: self.managed_dir(managed),
            dest: managed.node_dir.into(),
        }));
        m.push(Mount::Tmpfs(self.home().to_path_buf()));
        m.extend(self.home_mounts(exists));
        m.push(Mount::Bind {
            src: self.project.clone(),
            dest: self.project.clone(),
        });
        m.push(Mount::Bind {
            src: self.socket_dir(),
            dest: self.socket_dir(),
        });
        m.push(Mount::same(&self.tmux_conf()));
        m.push(Mount::RoBind {
            src: self.exe.clone(),
            dest: BOX_EXE.into(),
        });
        with_parent_dirs(m)
    }

    /// What the box sees of HOME's shared files over its own agent home: the node's, or the
    /// broker's copies of them (and of an OAuth login where the node has none).
    fn home_mounts(&self, exists: impl Fn(&Path) -> bool) -> Vec<Mount> {
        let in_home = self.copies_in_home();
        let copied: Vec<_> = self
            .broker_copies()
            .into_iter()
            .filter(|(dest, ..)| !in_home.contains(dest))
            .collect();
        let mut m = Vec::new();
        let mut binds = self.agent_home.binds(exists);
        // A copy in the agent home is seen through its own dir's bind: the node's file is not.
        binds.retain(|b| !in_home.contains(&b.dest));
        let copy_mount = |dest: &PathBuf, src: &PathBuf, writable: bool| {
            let (src, dest) = (src.clone(), dest.clone());
            if writable {
                Mount::Bind { src, dest }
            } else {
                Mount::RoBind { src, dest }
            }
        };
        // A copy where the node has no file (an OAuth login the box may make through the
        // broker) is bound over the box's own, after the agent home's dirs.
        let uncovered: Vec<Mount> = copied
            .iter()
            .filter(|(dest, _, writable)| *writable && !binds.iter().any(|b| b.dest == *dest))
            .map(|(dest, src, writable)| copy_mount(dest, src, *writable))
            .collect();
        m.extend(binds.into_iter().map(|b| {
            if let Some((dest, src, writable)) = copied.iter().find(|(dest, _, _)| *dest == b.dest)
            {
                // What the broker stands in for: its copy with placeholders, never the node's.
                return copy_mount(dest, src, *writable);
            }
            match (b.access, b.is_node_file()) {
                // The operator's tools rewrite these at any time (some by removing and
                // writing anew): one gone at the start leaves the box without it, not down.
                (Access::ReadWrite, true) => Mount::BindTry(b.dest),
                (Access::ReadOnly, true) => Mount::RoBindTry(b.dest),
                (Access::ReadWrite, false) => Mount::Bind {
                    src: b.src,
                    dest: b.dest,
                },
                (Access::ReadOnly, false) => Mount::RoBind {
                    src: b.src,
                    dest: b.dest,
                },
            }
        }));
        m.extend(uncovered);
        m
    }

    /// Environment of every process in the box: the tmux server, attach and exec alike.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let home = self.home().display();
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
            ("USER", account::BOX_USER.to_string()),
            ("LOGNAME", account::BOX_USER.to_string()),
            ("BOX_NAME", self.name.clone()),
            // Where tools that would use /var/tmp (the box has none) put what they stage.
            ("TMPDIR", "/tmp".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(
            self.egress
                .mode
                .isolated()
                .then(egress::proxy_env)
                .into_iter()
                .flatten(),
        )
        .chain(
            (!self.broker_rules().is_empty())
                .then(broker::ca_env)
                .into_iter()
                .flatten(),
        )
        .collect()
    }

    /// bwrap's arguments (without the program name); its child becomes the box user and
    /// supervises the foreground tmux server.
    pub(crate) fn bwrap_args(&self, mounts: &[Mount], info_fd: i32) -> Vec<String> {
        let mut a: Vec<String> = [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
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
                Mount::Tmp => {
                    let size = self.tmpfs_max.to_string();
                    a.extend(
                        ["--perms", "1777", "--size", &size, "--tmpfs", "/tmp"].map(String::from),
                    );
                }
                Mount::Shm => {
                    let size = self.tmpfs_max.to_string();
                    a.extend(
                        ["--perms", "1777", "--size", &size, "--tmpfs", "/dev/shm"]
                            .map(String::from),
                    );
                }
                Mount::Tmpfs(p) => {
                    a.extend([
                        "--size".into(),
                        self.tmpfs_max.to_string(),
                        "--tmpfs".into(),
                        s(p),
                    ]);
                }
                Mount::Dir(p) => a.extend(["--dir".into(), s(p)]),
                Mount::RoBind { src, dest } => a.extend(["--ro-bind".into(), s(src), s(dest)]),
                Mount::RoBindTry(p) => a.extend(["--ro-bind-try".into(), s(p), s(p)]),
                Mount::Bind { src, dest } => a.extend(["--bind".into(), s(src), s(dest)]),
                Mount::BindTry(p) => a.extend(["--bind-try".into(), s(p), s(p)]),
                Mount::DevBind(p) => a.extend(["--dev-bind-try".into(), s(p), s(p)]),
                Mount::MaskFile(p) => a.extend(["--ro-bind".into(), "/dev/null".into(), s(p)]),
                Mount::MaskDir(p) => {
                    a.extend(["--tmpfs".into(), s(p), "--remount-ro".into(), s(p)]);
                }
                Mount::Symlink { target, link } => {
                    a.extend(["--symlink".into(), target.clone(), s(link)]);
                }
            }
        }
        for (k, v) in self.env() {
            a.extend(["--setenv".into(), k, v]);
        }
        a.extend(["--chdir".into(), s(&self.project), "--".into()]);
        let anchor = Become {
            ids: self.ids,
            groups: self.groups(),
            own_home: Some(self.home().to_path_buf()),
            share_socket: Some(self.socket()),
            tasks: Some(self.tasks_max),
            chdir: None,
        };
        a.extend(anchor.argv(&[
            s(&self.tmux_bin),
            "-D".into(),
            "-S".into(),
            s(&self.socket()),
            "-f".into(),
            s(&self.tmux_conf()),
        ]));
        a
    }

    /// The box user's supplementary groups: the shared one, and those of its GPU's devices.
    fn groups(&self) -> Vec<u32> {
        let mut groups = vec![account::SHARED_GID];
        if let Some(gpu) = &self.gpu {
            groups.extend(
                gpu.groups
                    .iter()
                    .filter(|g| !groups.contains(g))
                    .collect::<Vec<_>>(),
            );
        }
        groups
    }

    /// `exec`: the command as the box user, in `dir`.
    pub(crate) fn exec_argv(&self, dir: &Path, command: &[String]) -> Vec<String> {
        Become {
            ids: self.ids,
            groups: self.groups(),
            own_home: None,
            share_socket: None,
            tasks: Some(self.tasks_max),
            chdir: Some(dir.to_path_buf()),
        }
        .argv(command)
    }

    /// A tmux client inside the box, as the client user: `attach`, and the readiness probe.
    pub(crate) fn client_argv(&self, tmux_args: &[String]) -> Vec<String> {
        let mut command = vec![s(&self.tmux_bin)];
        command.extend(tmux_args.iter().cloned());
        Become {
            ids: Ids::CLIENT,
            groups: vec![self.ids.gid],
            own_home: None,
            share_socket: None,
            tasks: None,
            chdir: Some(self.project.clone()),
        }
        .argv(&command)
    }

    pub(crate) fn attach_argv(&self) -> Vec<String> {
        self.client_argv(&tmux::attach_args(&self.socket()))
    }

    pub(crate) fn probe_argv(&self) -> Vec<String> {
        self.client_argv(&tmux::ready_args(&self.socket()))
    }

    /// Where `exec` starts: the caller's directory when it lies inside the project.
    pub(crate) fn exec_dir(&self, caller_cwd: Option<&Path>) -> PathBuf {
        match caller_cwd {
            Some(cwd) if cwd.starts_with(&self.project) => cwd.to_path_buf(),
            _ => self.project.clone(),
        }
    }
}

/// `--dir` for each parent of a mount that would otherwise be made by bwrap as 0700 root.
fn with_parent_dirs(mounts: Vec<Mount>) -> Vec<Mount> {
    // (destination, made by bwrap) of everything placed so far; `/` is bwrap's tmpfs.
    let mut placed: Vec<(PathBuf, bool)> = vec![("/".into(), true)];
    let mut out = Vec::with_capacity(mounts.len());
    for m in mounts {
        let dest = m.dest();
        let mut parents: Vec<&Path> = dest.ancestors().skip(1).collect();
        parents.reverse();
        for parent in parents.into_iter().skip(1) {
            let covering = placed
                .iter()
                .filter(|(p, _)| parent.starts_with(p))
                .max_by_key(|(p, _)| p.components().count());
            if let Some((p, true)) = covering
                && p != parent
            {
                out.push(Mount::Dir(parent.to_path_buf()));
                placed.push((parent.to_path_buf(), true));
            }
        }
        placed.push((dest, m.is_made_by_bwrap()));
        out.push(m);
    }
    out
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn spec() -> BoxSpec {
        BoxSpec::sample()
    }

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    #[rustfmt::skip]
    fn minimal_host_bwrap_argv() {
        // A host with no agent files at all, no /lib64, a kernel without sched_debug or
        // latency_stats, no sound.
        let spec = spec();
        let present = [
            "/bin", "/sbin", "/lib", "/proc/partitions", "/proc/kcore", "/proc/keys",
            "/proc/timer_list", "/proc/interrupts", "/proc/acpi", "/proc/scsi",
        ];
        let mounts = spec.mounts(|p| present.iter().any(|x| Path::new(x) == p));
        let own = "/var/lib/ag-box/homes/demo";
        assert_eq!(
            spec.bwrap_args(&mounts, INFO_FD),
            v(&[
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--clearenv",
                "--info-fd", "3",
                "--proc", "/proc",
                "--ro-bind", "/dev/null", "/proc/partitions",
                "--ro-bind", "/dev/null", "/proc/kcore",
                "--ro-bind", "/dev/null", "/proc/keys",
                "--ro-bind", "/dev/null", "/proc/timer_list",
                "--ro-bind", "/dev/null", "/proc/interrupts",
                "--tmpfs", "/proc/acpi", "--remount-ro", "/proc/acpi",
                "--tmpfs", "/proc/scsi", "--remount-ro", "/proc/scsi",
                "--dev", "/dev",
                "--perms", "1777", "--size", "2147483648", "--tmpfs", "/dev/shm",
                "--perms", "1777", "--size", "2147483648", "--tmpfs", "/tmp",
                "--ro-bind", "/usr", "/usr",
                "--symlink", "usr/bin", "/bin",
                "--symlink", "usr/sbin", "/sbin",
                "--symlink", "usr/lib", "/lib",
                "--ro-bind", "/etc", "/etc",
                "--ro-bind-try", "/nix", "/nix",
                "--dir", "/sys", "--dir", "/sys/fs", "--dir", "/sys/fs/cgroup",
                "--ro-bind", "/run/box/demo/passwd", "/etc/passwd",
                "--ro-bind", "/run/box/demo/group", "/etc/group",
                "--dir", "/run",
                "--ro-bind", "/run/box/demo/broker/ca-bundle.pem", "/run/ag-box-ca.pem",
                "--ro-bind", "/run/box/demo/claude-code", "/etc/claude-code",
                "--ro-bind", "/run/box/demo/codex", "/etc/codex",
                "--size", "2147483648", "--tmpfs", "/root",
                "--bind", &format!("{own}/.claude"), "/root/.claude",
                "--bind", &format!("{own}/.codex"), "/root/.codex",
                "--bind", &format!("{own}/.grok"), "/root/.grok",
                "--bind", &format!("{own}/.gemini"), "/root/.gemini",
                "--bind", &format!("{own}/.claude.json"), "/root/.claude.json",
                "--dir", "/root/.local",
                "--dir", "/root/.local/share",
                "--bind", &format!("{own}/.local/share/opencode"), "/root/.local/share/opencode",
                "--bind", "/root/demo", "/root/demo",
                "--dir", "/run/box",
                "--dir", "/run/box/demo",
                "--bind", "/run/box/demo/sock", "/run/box/demo/sock",
                "--ro-bind", "/run/box/demo/tmux.conf", "/run/box/demo/tmux.conf",
                "--ro-bind", "/opt/box/bin/ag-box", "/run/ag-box",
                "--setenv", "HOME", "/root",
                "--setenv", "PATH", "/root/.local/bin:/root/.nix-profile/bin:/nix/var/nix/profiles/default/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--setenv", "SHELL", "/bin/bash",
                "--setenv", "TERM", "xterm-256color",
                "--setenv", "LANG", "C.UTF-8",
                "--setenv", "USER", "agent",
                "--setenv", "LOGNAME", "agent",
                "--setenv", "BOX_NAME", "demo",
                "--setenv", "TMPDIR", "/tmp",
                "--setenv", "HTTP_PROXY", "http://127.0.0.1:3128",
                "--setenv", "HTTPS_PROXY", "http://127.0.0.1:3128",
                "--setenv", "http_proxy", "http://127.0.0.1:3128",
                "--setenv", "https_proxy", "http://127.0.0.1:3128",
                "--setenv", "NO_PROXY", "localhost,127.0.0.1,::1",
                "--setenv", "no_proxy", "localhost,127.0.0.1,::1",
                "--setenv", "NODE_USE_ENV_PROXY", "1",
                "--setenv", "SSL_CERT_FILE", "/run/ag-box-ca.pem",
                "--setenv", "NODE_EXTRA_CA_CERTS", "/run/ag-box-ca.pem",
                "--setenv", "REQUESTS_CA_BUNDLE", "/run/ag-box-ca.pem",
                "--setenv", "GIT_SSL_CAINFO", "/run/ag-box-ca.pem",
                "--chdir", "/root/demo", "--",
                "/run/ag-box", "__become", "--uid", "1000", "--gid", "1000",
                "--group", "2000065535", "--tasks", "4096",
                "--own-home", "/root", "--share-socket", "/run/box/demo/sock/tmux.sock", "--",
                "/usr/bin/tmux", "-D", "-S", "/run/box/demo/sock/tmux.sock", "-f", "/run/box/demo/tmux.conf",
            ])
        );
    }

    #[test]
    fn the_main_window_runs_the_agent_through_ag_box_then_the_shell() {
        let with = |main| BoxSpec { main, ..spec() };
        let claude = |fresh| MainWindow::Agent {
            name: "claude",
            fresh,
        };
        assert_eq!(
            [
                with(MainWindow::Shell).main_command(false),
                with(MainWindow::Shell).main_command(true),
                with(claude(false)).main_command(false),
                with(claude(true)).main_command(false),
                with(claude(false)).main_command(true),
            ],
            [
                None,
                None,
                Some("/run/ag-box __agent claude; exec bash -l".to_string()),
                Some("/run/ag-box __agent claude --fresh; exec bash -l".to_string()),
                Some(
                    "exec nix develop /etc/base-flake --command bash -c \
                     '/run/ag-box __agent claude; exec bash'"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_project_outside_home_gets_passable_parents() {
        let spec = BoxSpec {
            project: "/srv/work/p".into(),
            ..spec()
        };
        let mounts = spec.mounts(|_| false);
        let at = mounts
            .iter()
            .position(|m| m.dest() == Path::new("/srv/work/p"))
            .unwrap();
        assert_eq!(
            mounts[at - 2..=at].to_vec(),
            vec![
                Mount::Dir("/srv".into()),
                Mount::Dir("/srv/work".into()),
                Mount::Bind {
                    src: "/srv/work/p".into(),
                    dest: "/srv/work/p".into()
                },
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
            mounts[5..9].to_vec(),
            ["/bin", "/sbin", "/lib", "/lib64"]
                .map(|p| Mount::RoBindTry(p.into()))
                .to_vec()
        );
    }

    #[test]
    fn the_nodes_shared_files_are_bound_if_still_there_over_the_boxs_own_dirs() {
        let spec = spec();
        let present = [
            "/root/.claude/.credentials.json",
            "/root/.claude/settings.json",
        ];
        let mounts = spec.mounts(|p| present.iter().any(|x| Path::new(x) == p));
        let claude: Vec<Mount> = mounts
            .into_iter()
            .filter(|m| m.dest().starts_with("/root/.claude"))
            .collect();
        assert_eq!(
            claude,
            vec![
                Mount::Bind {
                    src: "/var/lib/ag-box/homes/demo/.claude".into(),
                    dest: "/root/.claude".into()
                },
                Mount::BindTry("/root/.claude/.credentials.json".into()),
                Mount::RoBindTry("/root/.claude/settings.json".into()),
            ]
        );
        assert_eq!(
            spec.bwrap_args(&claude[1..], INFO_FD)
                .windows(3)
                .filter(|w| w[0].ends_with("bind-try"))
                .map(|w| w.join(" "))
                .collect::<Vec<_>>(),
            v(&[
                "--bind-try /root/.claude/.credentials.json /root/.claude/.credentials.json",
                "--ro-bind-try /root/.claude/settings.json /root/.claude/settings.json",
            ])
        );
    }

    #[test]
    fn a_gpu_box_gets_the_device_nodes_what_of_sys_they_need_and_their_groups() {
        let gpu = BoxSpec {
            gpu: Some(Gpu {
                devices: vec!["/dev/dri".into(), "/dev/nvidia0".into()],
                groups: vec![44, 1000],
            }),
            ..spec()
        };
        let args = gpu.bwrap_args(&gpu.mounts(|_| true), INFO_FD);
        let shown = |flag: &str| {
            args.windows(2)
                .filter(|w| w[0] == flag)
                .map(|w| w[1].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(shown("--dev-bind-try"), ["/dev/dri", "/dev/nvidia0"]);
        assert!(
            GPU_SYS
                .iter()
                .all(|p| shown("--ro-bind-try").contains(&(*p).to_string())),
            "{args:?}"
        );
        // Its processes join the devices' groups (once each), beside the shared one.
        let gid = account::SHARED_GID.to_string();
        assert_eq!(
            gpu.exec_argv(Path::new("/root/demo"), &["true".into()]),
            v(&[
                "/run/ag-box",
                "__become",
                "--uid",
                "1000",
                "--gid",
                "1000",
                "--group",
                &gid,
                "--group",
                "44",
                "--group",
                "1000",
                "--tasks",
                "4096",
                "--chdir",
                "/root/demo",
                "--",
                "true",
            ])
        );
        // Without gpu=true: none of it (of /sys, only the empty cgroup dir every box has).
        let plain = spec().bwrap_args(&spec().mounts(|_| true), INFO_FD);
        assert!(
            !plain
                .windows(2)
                .any(|w| w[0] == "--dev-bind-try"
                    || w[0].contains("bind") && w[1].starts_with("/sys")),
            "{plain:?}"
        );
    }

    #[test]
    fn api_keys_are_seen_as_copies_and_claudes_settings_by_every_guarded_box() {
        let present = [
            "/root/.claude/settings.json",
            "/root/.claude/.credentials.json",
            "/root/.codex/auth.json",
            SYSTEM_CA_BUNDLE,
        ];
        let exists = |p: &Path| present.iter().any(|x| Path::new(x) == p);
        let keyed = |m: &Mount| {
            m.dest() == Path::new("/root/.claude/settings.json")
                || m.dest() == Path::new("/root/.claude/.credentials.json")
                || m.dest() == Path::new("/root/.codex/auth.json")
        };
        let with = |logins: Vec<&'static str>, held: Vec<&'static str>, mode| {
            let mut spec = BoxSpec {
                broker_held: held,
                egress: BoxPolicy {
                    mode,
                    allow: vec![],
                },
                ..spec()
            };
            spec.agent_home.logins = logins;
            spec.mounts(exists)
                .into_iter()
                .filter(keyed)
                .collect::<Vec<_>>()
        };
        let copy = |login: &str, dest: &str| Mount::RoBind {
            src: format!("/run/box/demo/broker/{login}").into(),
            dest: dest.into(),
        };
        let held = vec!["claude", "codex"];
        assert_eq!(
            with(vec!["codex"], held.clone(), egress::Mode::Allow),
            vec![
                copy("codex", "/root/.codex/auth.json"),
                copy("claude", "/root/.claude/settings.json"),
            ]
        );
        // Not given codex: no auth.json at all; Claude's settings still as a copy.
        assert_eq!(
            with(vec!["gh"], held.clone(), egress::Mode::None),
            vec![copy("claude", "/root/.claude/settings.json")]
        );
        // Codex's OAuth login (no key held): the node's file, shared as before.
        assert_eq!(
            with(vec!["codex"], vec!["claude"], egress::Mode::Allow),
            vec![
                Mount::BindTry("/root/.codex/auth.json".into()),
                copy("claude", "/root/.claude/settings.json"),
            ]
        );
        // Claude Code's OAuth login held: a box given claude sees its copy, its own to write (its
        // CLI saves what the broker answers); one not given it, nothing of it.
        let with_oauth = vec!["claude", "claude-oauth"];
        let own_copy = |login: &str, dest: &str| Mount::Bind {
            src: format!("/run/box/demo/broker/{login}").into(),
            dest: dest.into(),
        };
        assert_eq!(
            with(vec!["claude"], with_oauth.clone(), egress::Mode::Allow),
            vec![
                own_copy("claude-oauth", "/root/.claude/.credentials.json"),
                copy("claude", "/root/.claude/settings.json"),
            ]
        );
        assert_eq!(
            with(vec!["gh"], with_oauth.clone(), egress::Mode::Allow),
            vec![copy("claude", "/root/.claude/settings.json")]
        );
        // A file that holds no login (`claude-oauth` not held): the node's, as before.
        assert_eq!(
            with(vec!["claude"], vec!["claude"], egress::Mode::Allow),
            vec![
                Mount::BindTry("/root/.claude/.credentials.json".into()),
                copy("claude", "/root/.claude/settings.json"),
            ]
        );
        // On the host's network: the node's files.
        assert_eq!(
            with(vec!["claude"], with_oauth, egress::Mode::Host),
            vec![
                Mount::BindTry("/root/.claude/.credentials.json".into()),
                Mount::RoBindTry("/root/.claude/settings.json".into()),
            ]
        );
        assert_eq!(
            with(vec!["codex"], held, egress::Mode::Host),
            vec![
                Mount::BindTry("/root/.codex/auth.json".into()),
                Mount::RoBindTry("/root/.claude/settings.json".into()),
            ]
        );
    }

    #[test]
    fn an_oauth_login_is_a_copy_the_box_may_write_even_where_the_node_has_none() {
        let own_copy = |login: &str, dest: &str| Mount::Bind {
            src: format!("/run/box/demo/broker/{login}").into(),
            dest: dest.into(),
        };
        let with_oauth = vec!["claude", "claude-oauth"];
        // The node has no such file (a box may log in through the broker): the copy all the same.
        let spec = BoxSpec {
            broker_held: with_oauth.clone(),
            ..spec()
        };
        let mut given = spec.clone();
        given.agent_home.logins = vec!["claude"];
        let mounts = given.mounts(|p| p == Path::new(SYSTEM_CA_BUNDLE));
        assert!(
            mounts.contains(&own_copy("claude-oauth", "/root/.claude/.credentials.json")),
            "{mounts:?}"
        );
        assert_eq!(
            given.broker_copy_points(),
            [PathBuf::from(".claude/.credentials.json")]
        );
    }

    #[test]
    fn a_brokered_login_is_seen_as_its_copy_and_the_node_ca_is_trusted() {
        let present = ["/root/.config/gh", SYSTEM_CA_BUNDLE];
        let exists = |p: &Path| present.iter().any(|x| Path::new(x) == p);
        let brokered = |m: &Mount| {
            m.dest().starts_with("/root/.config/gh")
                || m.dest() == Path::new(SYSTEM_CA_BUNDLE)
                || m.dest() == Path::new(broker::BOX_CA_BUNDLE)
        };
        let bundle = "/run/box/demo/broker/ca-bundle.pem";
        let guarded = spec();
        assert_eq!(
            guarded
                .mounts(exists)
                .into_iter()
                .filter(brokered)
                .collect::<Vec<_>>(),
            vec![
                Mount::RoBind {
                    src: bundle.into(),
                    dest: broker::BOX_CA_BUNDLE.into()
                },
                Mount::RoBind {
                    src: bundle.into(),
                    dest: SYSTEM_CA_BUNDLE.into()
                },
                Mount::RoBind {
                    src: "/run/box/demo/broker/gh".into(),
                    dest: "/root/.config/gh".into()
                },
            ]
        );
        assert!(
            guarded
                .env()
                .contains(&("SSL_CERT_FILE".into(), broker::BOX_CA_BUNDLE.into()))
        );
        // On the host's network there is no proxy to stand in: the node's own files.
        let host = BoxSpec {
            egress: BoxPolicy {
                mode: egress::Mode::Host,
                allow: vec![],
            },
            ..spec()
        };
        assert_eq!(
            host.mounts(exists)
                .into_iter()
                .filter(brokered)
                .collect::<Vec<_>>(),
            vec![Mount::RoBindTry("/root/.config/gh".into())]
        );
        assert!(!host.env().iter().any(|(k, _)| k == "SSL_CERT_FILE"));
        // A box not given gh sees none of it, and needs no CA.
        let mut without = spec();
        without.agent_home.logins = vec!["claude"];
        assert_eq!(
            without
                .mounts(exists)
                .into_iter()
                .filter(brokered)
                .collect::<Vec<_>>(),
            vec![]
        );
    }

    #[test]
    fn nothing_of_the_host_home_but_the_shared_files_appears() {
        let spec = spec();
        let args = spec.bwrap_args(&spec.mounts(|_| true), INFO_FD);
        let sources: Vec<&String> = args
            .windows(3)
            .filter(|w| w[0].starts_with("--bind") || w[0].starts_with("--ro-bind"))
            .map(|w| &w[1])
            .filter(|src| src.starts_with("/root/"))
            .collect();
        for src in &sources {
            let rel = src.strip_prefix("/root/").unwrap();
            assert!(
                src.as_str() == "/root/demo"
                    || super::super::agent_home::CREDENTIALS.contains(&rel)
                    || super::super::agent_home::KEYED_CONFIG.contains(&rel)
                    || super::super::agent_home::GLOBAL_CONFIG.contains(&rel),
                "{src} is bound from the node's home"
            );
        }
        assert!(!args.join(" ").contains(".ssh"));
        assert!(!args.iter().any(|a| a == "/run/box/demo/info.json"));
    }

    #[test]
    fn exec_and_attach_run_as_the_box_user_and_the_client() {
        let spec = spec();
        assert_eq!(
            spec.exec_argv(Path::new("/root/demo/src"), &v(&["git", "status"])),
            v(&[
                "/run/ag-box",
                "__become",
                "--uid",
                "1000",
                "--gid",
                "1000",
                "--group",
                "2000065535",
                "--tasks",
                "4096",
                "--chdir",
                "/root/demo/src",
                "--",
                "git",
                "status"
            ])
        );
        assert_eq!(
            spec.attach_argv(),
            v(&[
                "/run/ag-box",
                "__become",
                "--uid",
                "65533",
                "--gid",
                "65533",
                "--group",
                "1000",
                "--chdir",
                "/root/demo",
                "--",
                "/usr/bin/tmux",
                "-N",
                "-S",
                "/run/box/demo/sock/tmux.sock",
                "new-session",
                "-A",
                "-s",
                "main"
            ])
        );
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
