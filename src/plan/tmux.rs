//! The box's tmux server config and the client argvs that talk to it.

use std::path::Path;

use super::account::CLIENT_USER;

pub(crate) const INNER_CONF: &str = "/etc/box/tmux-inner.conf";
pub(crate) const BASE_FLAKE: &str = "/etc/base-flake";

/// Lets the client user in (it attaches from inside the box), sources the operator's inner
/// config when present and creates session `main` in the project, its first window running
/// `main` when given (the box's agent); a `nix` box's shells start inside the base flake's dev
/// shell.
pub(crate) fn server_conf(project: &Path, nix: bool, main: Option<&str>) -> String {
    let shell = if nix {
        format!("set -g default-command \"nix develop {BASE_FLAKE} --command bash\"\n")
    } else {
        String::new()
    };
    let command = main.map(|c| format!(" {}", quote(c))).unwrap_or_default();
    format!(
        "# written by ag-box at each start\n\
         server-access -a {CLIENT_USER}\n\
         source-file -q {INNER_CONF}\n\
         {shell}new-session -d -s main -c {}{command}\n",
        quote(&project.to_string_lossy())
    )
}

/// tmux double-quoted string: backslash, quote and `$` are special inside.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `-N`: a client never starts a server of its own (a box without one is down).
pub(crate) fn attach_args(socket: &Path) -> Vec<String> {
    vec![
        "-N".into(),
        "-S".into(),
        socket.to_string_lossy().into_owned(),
        "new-session".into(),
        "-A".into(),
        "-s".into(),
        "main".into(),
    ]
}

/// What the readiness probe's client prints once the server has let it in.
pub(crate) const READY: &str = "ag-box-ready";

/// The readiness probe: an admitted client prints [`READY`]; a refused one prints nothing
/// (tmux 3.3 says `access not allowed` on stderr and still exits 0).
pub(crate) fn ready_args(socket: &Path) -> Vec<String> {
    vec![
        "-N".into(),
        "-S".into(),
        socket.to_string_lossy().into_owned(),
        "display-message".into(),
        "-p".into(),
        READY.into(),
    ]
}

/// The server owner's first client: a `tmux -D` server reads its config (which admits the
/// client user) only when a client it allows arrives, and until then it refuses all others.
pub(crate) fn load_config_args(socket: &Path) -> Vec<String> {
    vec![
        "-N".into(),
        "-S".into(),
        socket.to_string_lossy().into_owned(),
        "start-server".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn conf_creates_main_in_the_project() {
        assert_eq!(
            server_conf(Path::new("/srv/my \"q\" $x"), false, None),
            "# written by ag-box at each start\n\
             server-access -a ag-box-client\n\
             source-file -q /etc/box/tmux-inner.conf\n\
             new-session -d -s main -c \"/srv/my \\\"q\\\" \\$x\"\n"
        );
    }

    #[test]
    fn the_main_window_runs_the_command_it_is_given() {
        assert_eq!(
            server_conf(
                Path::new("/root/p"),
                false,
                Some("/run/ag-box __agent claude; exec bash -l")
            ),
            "# written by ag-box at each start\n\
             server-access -a ag-box-client\n\
             source-file -q /etc/box/tmux-inner.conf\n\
             new-session -d -s main -c \"/root/p\" \"/run/ag-box __agent claude; exec bash -l\"\n"
        );
    }

    #[test]
    fn nix_boxes_start_shells_in_the_base_flake() {
        assert_eq!(
            server_conf(Path::new("/root/p"), true, None),
            "# written by ag-box at each start\n\
             server-access -a ag-box-client\n\
             source-file -q /etc/box/tmux-inner.conf\n\
             set -g default-command \"nix develop /etc/base-flake --command bash\"\n\
             new-session -d -s main -c \"/root/p\"\n"
        );
    }

    #[test]
    fn client_argvs() {
        let sock = Path::new("/run/box/d/tmux.sock");
        assert_eq!(
            attach_args(sock),
            [
                "-N",
                "-S",
                "/run/box/d/tmux.sock",
                "new-session",
                "-A",
                "-s",
                "main"
            ]
        );
        assert_eq!(
            ready_args(sock),
            [
                "-N",
                "-S",
                "/run/box/d/tmux.sock",
                "display-message",
                "-p",
                "ag-box-ready"
            ]
        );
        assert_eq!(
            load_config_args(sock),
            ["-N", "-S", "/run/box/d/tmux.sock", "start-server"]
        );
    }
}
