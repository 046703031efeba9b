//! Pausing a running box while root reads its trees, so that a box cannot swap a dir for a link
//! under a snapshot that is reading it: the cgroup v2 freezer on the box's own cgroup (its
//! unit's, or the one the direct runtime's supervisor makes for it). The pause is recorded in
//! the box's run dir (root's alone) with the process that holds it, so `status` says so and a
//! pause left behind by an ag-box that died is undone by the next one that enters the box.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::plan::sandbox::BoxSpec;
use crate::plan::unit;
use crate::store::lease::timestamp;
use crate::sys::interrupt;
use crate::sys::runtime_kind::Runtime;
use nix::fcntl::{Flock, FlockArg};

/// How long the kernel may take to stop every task of a box (tasks in uninterruptible sleep
/// are stopped when they leave it).
const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

/// The box is paused until this is dropped. While it lives, the marker file is locked (a
/// pause whose marker nobody holds locked is an orphan) and SIGINT, SIGTERM and SIGHUP are
/// noted, not obeyed, so the command ends through this guard's thaw.
pub(crate) struct Paused {
    cgroup: PathBuf,
    marker: PathBuf,
    _held: Flock<fs::File>,
    _signals: interrupt::Shield,
}

impl Drop for Paused {
    fn drop(&mut self) {
        thaw(&self.cgroup, &self.marker);
    }
}

/// What the run dir records of a pause.
#[derive(Serialize, Deserialize)]
struct Marker {
    cgroup: PathBuf,
    since: String,
}

/// Where cgroup v2 is mounted: `/sys/fs/cgroup`, or `.../unified` on a hybrid host.
pub(crate) fn v2_mount() -> Option<&'static Path> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(Path::new)
        .find(|m| m.join("cgroup.controllers").exists())
}

/// The v2 cgroup of process `pid` (`self` for this one), as a path below the mount.
pub(crate) fn v2_path_of(pid: &str) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_start_matches('/').to_string())
}

/// The box's own v2 cgroup: the one its sandbox runs in, when that is the box's (its unit's or
/// the direct runtime's `ag-box-<box>`) and this process is not in it (which would freeze
/// ag-box too). `pid` is its sandbox process.
fn box_cgroup(spec: &BoxSpec, runtime: Runtime, pid: i32) -> Option<(PathBuf, i32)> {
    let mount = v2_mount()?;
    let rel = v2_path_of(&pid.to_string())?;
    let own_name = match runtime {
        Runtime::Systemd => format!("{}.service", unit::unit_name(&spec.name)),
        Runtime::Direct => unit::direct_cgroup_name(&spec.name),
    };
    if rel.rsplit('/').next() != Some(own_name.as_str()) {
        tracing::debug!(
            "box '{}': its sandbox is in cgroup /{rel}, not its own",
            spec.name
        );
        return None;
    }
    let mine = v2_path_of("self").unwrap_or_default();
    if mine == rel || mine.starts_with(&format!("{rel}/")) {
        tracing::debug!("box '{}': ag-box runs in its cgroup /{rel}", spec.name);
        return None;
    }
    Some((mount.join(rel), pid))
}

fn marker_of(spec: &BoxSpec) -> PathBuf {
    spec.run_dir.join("paused.json")
}

/// Pause every process of the running box. None (with the reason logged) where it cannot be
/// paused here: no cgroup v2, the box started before it had a cgroup of its own, its tasks did
/// not all stop in time, or a process of its own runs outside its cgroup (then it runs on, and
/// the snapshot is checked instead). `sandbox_pid` is its sandbox process (`enter::Sandbox`).
pub(crate) fn pause(spec: &BoxSpec, runtime: Runtime, sandbox_pid: i32) -> Result<Option<Paused>> {
    let Some((cgroup, sandbox_pid)) = box_cgroup(spec, runtime, sandbox_pid) else {
        return Ok(None);
    };
    let marker = marker_of(spec);
    // The system clock: a marker of this node's, read back only here (`status`, the orphan check).
    let record = Marker {
        cgroup: cgroup.clone(),
        since: timestamp(SystemTime::now()),
    };
    let signals = interrupt::Shield::new();
    // Locked before it is in place: no other command ever sees it unlocked while we live.
    let fresh = marker.with_extension("json.new");
    let file = fs::File::create(&fresh).with_context(|| format!("creating {}", fresh.display()))?;
    let held = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .with_context(|| format!("locking {}", fresh.display()))?;
    std::io::Write::write_all(&mut &*held, &serde_json::to_vec(&record)?)
        .and_then(|()| fs::rename(&fresh, &marker))
        .with_context(|| format!("writing {}", marker.display()))?;
    let paused = Paused {
        cgroup,
        marker,
        _held: held,
        _signals: signals,
    };
    fs::write(paused.cgroup.join("cgroup.freeze"), "1")
        .with_context(|| format!("pausing box '{}'", spec.name))?;
    let deadline = Instant::now() + FREEZE_TIMEOUT;
    while !frozen(&paused.cgroup) {
        if Instant::now() > deadline {
            tracing::warn!(
                "box '{}': its processes did not all pause within {}s; the snapshot reads it running",
                spec.name,
                FREEZE_TIMEOUT.as_secs()
            );
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(outside) = outside_cgroup(sandbox_pid, &paused.cgroup) {
        tracing::warn!(
            "box '{}': its process {outside} runs outside its cgroup, so pausing does not hold the box still; the snapshot is checked for what the box could not have made instead",
            spec.name
        );
        return Ok(None);
    }
    tracing::debug!("box '{}': paused", spec.name);
    Ok(Some(paused))
}

/// A process in the sandbox's pid namespace whose cgroup is not `cgroup` or below it (one a
/// box's tmux server made of an attached client, say).
fn outside_cgroup(sandbox_pid: i32, cgroup: &Path) -> Option<i32> {
    let ns = fs::read_link(format!("/proc/{sandbox_pid}/ns/pid")).ok()?;
    let rel = cgroup
        .strip_prefix(v2_mount()?)
        .ok()?
        .to_string_lossy()
        .into_owned();
    fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| fs::read_link(format!("/proc/{pid}/ns/pid")).ok().as_ref() == Some(&ns))
        .find(|pid| {
            // Gone meanwhile: no matter.
            v2_path_of(&pid.to_string())
                .is_some_and(|p| p != rel && !p.starts_with(&format!("{rel}/")))
        })
}

fn frozen(cgroup: &Path) -> bool {
    fs::read_to_string(cgroup.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l == "frozen 1"))
}

/// Resume the box; the marker stays when that failed, so the next command tries again.
fn thaw(cgroup: &Path, marker: &Path) {
    match fs::write(cgroup.join("cgroup.freeze"), "0") {
        Err(e) if cgroup.exists() => {
            tracing::warn!("resuming the box in {}: {e}", cgroup.display());
        }
        _ => {
            let _ = fs::remove_file(marker);
        }
    }
}

/// Since when the box has been paused for a snapshot, if it is.
pub(crate) fn paused_since(spec: &BoxSpec) -> Option<String> {
    read_marker(spec).map(|m| m.since)
}

fn read_marker(spec: &BoxSpec) -> Option<Marker> {
    serde_json::from_slice(&fs::read(marker_of(spec)).ok()?).ok()
}

/// Resume a box whose pause outlived the ag-box that made it (killed mid-snapshot): its marker
/// is no longer locked.
pub(crate) fn resume_orphaned(spec: &BoxSpec) {
    let Some(m) = read_marker(spec) else {
        return;
    };
    let Ok(file) = fs::File::open(marker_of(spec)) else {
        return;
    };
    let Ok(_orphan) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
        return;
    };
    tracing::info!(
        "box '{}': resuming it (paused since {} by an ag-box that is gone)",
        spec.name,
        m.since
    );
    thaw(&m.cgroup, &marker_of(spec));
}
