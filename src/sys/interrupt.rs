//! SIGINT, SIGTERM and SIGHUP: noted instead of obeyed at once where dying would leave a mess.
//! - `up` notes them from the start ([`arm`]), so that it stops at the next step boundary and
//!   hands the lease back instead of dying half-way.
//! - Every command notes them while a restic of its runs ([`Shield`]) and passes them on to that
//!   restic as SIGINT: restic removes its repository lock on SIGINT (before 0.18, on SIGINT
//!   only), and it says so on the pipe ag-box reads, so with ag-box gone first, that write would
//!   kill it holding the lock. The command then stops as restic ends ([`check`]). restic runs in
//!   a process group of its own (`sys::restic`), so a terminal's Ctrl-C reaches ag-box alone.
//!
//! The actions are installed with `signal-hook` once, at the first arm or shield; with nothing
//! to note, each acts as the signal's default action.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use anyhow::Result;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::unistd::Pid;

use crate::error::UserError;

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

static CAUGHT: AtomicI32 = AtomicI32::new(0);
/// `up` noted signals from its start: a shield ending leaves that as it is.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Shields up now.
static SHIELDS: AtomicUsize = AtomicUsize::new(0);
/// The restic processes running under a shield (0: a free slot).
static RESTICS: [AtomicI32; 128] = [const { AtomicI32::new(0) }; 128];
static INSTALLED: Once = Once::new();

/// In signal context: only atomics, kill(2) and the default action's emulation.
fn on_signal(signal: Signal) {
    if !ARMED.load(Ordering::SeqCst) && SHIELDS.load(Ordering::SeqCst) == 0 {
        // Nothing to note: as if never caught (a SIGTERM ends this process).
        let _ = signal_hook::low_level::emulate_default_handler(signal as i32);
        return;
    }
    CAUGHT.store(signal as i32, Ordering::SeqCst);
    for slot in &RESTICS {
        let pid = slot.load(Ordering::SeqCst);
        if pid > 0 {
            // A restic already gone is no matter.
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
    }
}

/// Whether ag-box was started with `signal` ignored (`nohup`, a script's `&`): it stays so.
/// (Read by swapping in "ignore" for a moment: a disposition cannot be read alone.)
fn started_ignored(signal: Signal) -> bool {
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: ignoring installs no handler; the old action is put back at once.
    match unsafe { sigaction(signal, &ignore) } {
        Ok(old) if old.handler() == SigHandler::SigIgn => true,
        // SAFETY: the action that was there before, as it was.
        Ok(old) => unsafe { sigaction(signal, &old) }.is_err(),
        Err(_) => true,
    }
}

fn install() {
    INSTALLED.call_once(|| {
        for signal in SIGNALS {
            if started_ignored(signal) {
                continue;
            }
            // SAFETY: `on_signal` is async-signal-safe (see there).
            let installed = unsafe {
                signal_hook::low_level::register(signal as i32, move || on_signal(signal))
            };
            if let Err(e) = installed {
                tracing::debug!("not catching {signal}: {e}");
            }
        }
    });
}

/// From here on SIGINT, SIGTERM and SIGHUP are noted for [`check`] (unless ignored from the
/// start: `nohup ag-box up` goes on after a hangup).
pub(crate) fn arm() {
    ARMED.store(true, Ordering::SeqCst);
    install();
}

/// Fails once a noted signal arrived, naming the step it stopped before.
pub(crate) fn check(step: &str) -> Result<()> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => Ok(()),
        n => {
            let name = Signal::try_from(n).map_or_else(|_| n.to_string(), |s| s.to_string());
            Err(UserError::failed(
                format!("interrupted by {name} before {step}"),
                "run the command again when you are ready",
            )
            .into())
        }
    }
}

/// While it lives, signals are noted (not obeyed) and passed on to the restic it was told of.
/// Made before the restic is started, so that no signal falls between the two.
pub(crate) struct Shield {
    slot: Option<usize>,
}

impl Shield {
    pub(crate) fn new() -> Shield {
        SHIELDS.fetch_add(1, Ordering::SeqCst);
        install();
        Shield { slot: None }
    }

    /// The restic just started: a signal from here on reaches it too.
    pub(crate) fn forward_to(&mut self, pid: u32) {
        let Ok(pid) = i32::try_from(pid) else { return };
        // More at once than slots: those are not told (a unit's stop still reaches them).
        self.slot = RESTICS.iter().position(|s| {
            s.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
    }

    /// Its restic has ended: signals are obeyed again, and one noted meanwhile stops the
    /// command here.
    pub(crate) fn end(self, step: &str) -> Result<()> {
        drop(self);
        check(step)
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            RESTICS[i].store(0, Ordering::SeqCst);
        }
        SHIELDS.fetch_sub(1, Ordering::SeqCst);
    }
}
