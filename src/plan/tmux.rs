//! The box's tmux server config and the client argvs that talk to it.

use std::path::Path;

use super::account::CLIENT_USER;
use super::box_exe::BOX_EXE;

pub(crate) const INNER_CONF: &str = "/etc/box/tmux-inner.conf";
pub(crate) const BASE_FLAKE: &str = "/etc/base-flake";

/// Lets the client user in (it attaches from inside the box), sources the operator's inner
/// config when present and creates session `main` in the project, its first window running
/// `main` when given (the box's agent); a `nix` box's shells start inside the base flake's dev
/// shell. `monitored`: the agent whose state that window's terminal tells ([`monitor`]).
pub(crate) fn server_conf(
    project: &Path,
    nix: bool,
    main: Option<&str>,
    monitored: Option<&str>,
) -> String {
    let shell = if nix {
        format!("set -g default-command \"nix develop {BASE_FLAKE} --command bash\"\n")
    } else {
        String::new()
    };
    let command = main.map(|c| format!(" {}", quote(c))).unwrap_or_default();
    let monitor = monitored.map(monitor).unwrap_or_default();
    format!(
        "# written by ag-box at each start\n\
         server-access -a {CLIENT_USER}\n\
         source-file -q {INNER_CONF}\n\
         {shell}new-session -d -s main -c {}{command}\n\
         {monitor}",
        quote(&project.to_string_lossy())
    )
}

/// Seconds without output after which an agent known by its terminal is taken to be idle.
pub(crate) const QUIET_SECS: u32 = 10;

/// The terminal fallback for an agent whose own signals ag-box does not hear (docs/design.md
/// "Attention"): on the first window (marked `@ag-box-agent`), output says `working`, a bell
/// `waiting` and [`QUIET_SECS`] of silence after work `idle`. A window option holds what was
/// last said, so a spinner's every frame costs no process and only a change runs
/// `__agent-state <agent> <state>`. The output that comes with a bell (the prompt drawn) is
/// not an answer: a `waiting` window turns `working` only on output after a silence.
/// `kill-session -C` re-arms the activity alert, which tmux fires once until it is cleared.
/// tmux rings every attached client's bell with each activity alert, many a second for the
/// window in view: so output and silence are watched only while nobody is attached (whoever
/// is sees the agent). Hooks are appended, never replacing the operator's own.
fn monitor(agent: &str) -> String {
    let tell = |state: &str| format!("run-shell -b \"{BOX_EXE} __agent-state {agent} {state}\"");
    let (working, waiting, idle) = (tell("working"), tell("waiting"), tell("idle"));
    format!(
        "set -g activity-action any\n\
         set -g silence-action any\n\
         set-hook -ga client-attached {{ set -g activity-action none ; set -g silence-action none }}\n\
         set-hook -ga client-detached {{ if -F \"#{{==:#{{session_attached}},0}}\" {{ set -g activity-action any ; set -g silence-action any }} }}\n\
         set -w -t main:^ @ag-box-agent {agent}\n\
         set -w -t main:^ monitor-activity on\n\
         set -w -t main:^ monitor-silence {QUIET_SECS}\n\
         set-hook -ga alert-activity {{ if -F \"#{{&&:#{{@ag-box-agent}},#{{!=:#{{@ag-box-heard}},working}}}}\" {{ if -F \"#{{!=:#{{@ag-box-heard}},waiting}}\" {{ set -w @ag-box-heard working ; {working} }} }} }}\n\
         set-hook -ga alert-bell {{ if -F \"#{{@ag-box-agent}}\" {{ set -w @ag-box-heard waiting ; {waiting} }} }}\n\
         set-hook -ga alert-silence {{ if -F \"#{{&&:#{{@ag-box-agent}},#{{==:#{{@ag-box-heard}},working}}}}\" {{ set -w @ag-box-heard idle ; {idle} }} {{ if -F \"#{{&&:#{{@ag-box-agent}},#{{==:#{{@ag-box-heard}},waiting}}}}\" {{ set -w @ag-box-heard quiet }} }} ; kill-session -C }}\n"
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
            server_conf(Path::new("/srv/my \"q\" $x"), false, None, None),
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
                Some("/run/ag-box __agent claude; exec bash -l"),
                None
            ),
            "# written by ag-box at each start\n\
             server-access -a ag-box-client\n\
             source-file -q /etc/box/tmux-inner.conf\n\
             new-session -d -s main -c \"/root/p\" \"/run/ag-box __agent claude; exec bash -l\"\n"
        );
    }

    #[test]
    fn a_monitored_agents_window_tells_its_state_on_output_bell_and_silence() {
        assert_eq!(
            server_conf(
                Path::new("/root/p"),
                false,
                Some("/run/ag-box __agent gemini; exec bash -l"),
                Some("gemini")
            ),
            r##"# written by ag-box at each start
server-access -a ag-box-client
source-file -q /etc/box/tmux-inner.conf
new-session -d -s main -c "/root/p" "/run/ag-box __agent gemini; exec bash -l"
set -g activity-action any
set -g silence-action any
set-hook -ga client-attached { set -g activity-action none ; set -g silence-action none }
set-hook -ga client-detached { if -F "#{==:#{session_attached},0}" { set -g activity-action any ; set -g silence-action any } }
set -w -t main:^ @ag-box-agent gemini
set -w -t main:^ monitor-activity on
set -w -t main:^ monitor-silence 10
set-hook -ga alert-activity { if -F "#{&&:#{@ag-box-agent},#{!=:#{@ag-box-heard},working}}" { if -F "#{!=:#{@ag-box-heard},waiting}" { set -w @ag-box-heard working ; run-shell -b "/run/ag-box __agent-state gemini working" } } }
set-hook -ga alert-bell { if -F "#{@ag-box-agent}" { set -w @ag-box-heard waiting ; run-shell -b "/run/ag-box __agent-state gemini waiting" } }
set-hook -ga alert-silence { if -F "#{&&:#{@ag-box-agent},#{==:#{@ag-box-heard},working}}" { set -w @ag-box-heard idle ; run-shell -b "/run/ag-box __agent-state gemini idle" } { if -F "#{&&:#{@ag-box-agent},#{==:#{@ag-box-heard},waiting}}" { set -w @ag-box-heard quiet } } ; kill-session -C }
"##
        );
    }

    #[test]
    fn nix_boxes_start_shells_in_the_base_flake() {
        assert_eq!(
            server_conf(Path::new("/root/p"), true, None, None),
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
