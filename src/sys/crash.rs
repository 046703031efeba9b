//! Crash points for the fault tests. Built with the `crash-points` feature,
//! `AG_BOX_CRASH_AT=<point>` makes the process abort at that point, as a kill -9 or a power cut
//! would: no destructor, no cleanup, no hand-back; `AG_BOX_PAUSE_AT=<point>` makes it wait
//! there for 3 s (for a test to send a signal). Without the feature, points cost nothing.

#[cfg(feature = "crash-points")]
pub(crate) fn point(name: &str) {
    let armed = |var: &str| std::env::var(var).is_ok_and(|v| v == name);
    if armed("AG_BOX_PAUSE_AT") {
        say!("ag-box: pausing at {name}");
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    if armed("AG_BOX_CRASH_AT") {
        say!("ag-box: crash point {name}");
        std::process::abort();
    }
}

#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub(crate) fn point(_name: &str) {}
