//! One command at a time per box on a node (`up`, `park`, `snapshot`, `drop`, `track`): an
//! exclusive `flock` on `$BOX_STATE_DIR/locks/<name>.lock`, which names its holder. A second
//! command waits up to `BOX_LOCK_WAIT`, then fails naming the holder. The kernel drops the lock
//! with its process, however that process ends.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::UserError;
use crate::plan::unit::FINISH_SUBCOMMAND;
use crate::store::lease::timestamp;

pub(crate) struct BoxLock {
    _held: Flock<File>,
}

pub(crate) fn acquire(state_dir: &Path, name: &str, verb: &str, wait: Duration) -> Result<BoxLock> {
    let dir = state_dir.join("locks");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.lock"));
    let deadline = Instant::now() + wait;
    let mut said = false;
    let mut ended: Option<String> = None;
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut held) => {
                // The system clock: shown to a command of this node that waits for the lock.
                let holder = format!(
                    "'ag-box {verb}' (pid {}) since {}",
                    std::process::id(),
                    timestamp(std::time::SystemTime::now())
                );
                held.set_len(0)
                    .and_then(|()| held.rewind())
                    .and_then(|()| held.write_all(holder.as_bytes()))
                    .with_context(|| format!("writing {}", path.display()))?;
                return Ok(BoxLock { _held: held });
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                // Asked once per holder: one may take over from another while this waits.
                if ENDS_FINISHER.contains(&verb)
                    && ended.as_deref() != Some(holder.as_str())
                    && end_finisher(name, &holder)
                {
                    ended = Some(holder.clone());
                    // It lets go of the lock in a moment: nothing to tell.
                    said = true;
                }
                let holder = if holder.trim().is_empty() {
                    "another process".to_string()
                } else {
                    holder.trim().to_string()
                };
                if Instant::now() >= deadline {
                    return Err(UserError::failed(
                        format!("box '{name}' is busy on this node: {holder} holds it"),
                        format!(
                            "wait for it to finish and run the command again (waited {}; BOX_LOCK_WAIT sets how long)",
                            humantime::format_duration(wait)
                        ),
                    )
                    .into());
                }
                if !said {
                    say!("box '{name}' is busy: {holder} holds it; waiting");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err((_, e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
}

/// The verb of a quick park's whole snapshot (`lifecycle::finish`).
pub(crate) const FINISH_VERB: &str = "finish-park";

/// The commands that end a quick park's whole snapshot rather than wait for it: those that
/// want the box now (the box's next park saves it whole instead). The others wait the few
/// seconds it takes, and then find the box's latest whole.
const ENDS_FINISHER: [&str; 2] = ["up", "drop"];

/// Ask the finisher that `holder` names to end (SIGTERM: it passes it on to its restic, which
/// removes its repository lock, and the box lock goes with the process). Only a process that
/// is a finisher of this very box: the text may be a holder's that has since ended.
/// True when it was one, and was asked.
fn end_finisher(name: &str, holder: &str) -> bool {
    let Some(pid) = holder
        .strip_prefix(&format!("'ag-box {FINISH_VERB}' (pid "))
        .and_then(|rest| rest.split_once(')'))
        .and_then(|(pid, _)| pid.parse::<i32>().ok())
    else {
        return false;
    };
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    if !(args.contains(&FINISH_SUBCOMMAND.as_bytes()) && args.contains(&name.as_bytes())) {
        return false;
    }
    tracing::info!(
        "box '{name}': ending the whole snapshot after its quick park (pid {pid}); its next park takes one"
    );
    kill(Pid::from_raw(pid), Signal::SIGTERM).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_then_fails_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), "b", "park", Duration::ZERO).unwrap();
        let e = acquire(dir.path(), "b", "up", Duration::from_millis(250))
            .err()
            .unwrap();
        let u = e.downcast_ref::<UserError>().unwrap();
        assert!(
            u.message
                .starts_with("box 'b' is busy on this node: 'ag-box park' (pid "),
            "{u}"
        );
        drop(first);
        acquire(dir.path(), "b", "up", Duration::ZERO).unwrap();
        acquire(dir.path(), "other", "up", Duration::ZERO).unwrap();
    }
}
