//! restic, shelled out: repository access, backup with progress, restore, listing.
//! Secrets reach restic through its environment only.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{Config, Secret};
use crate::error::UserError;
use crate::plan::restic::{self as plan, BackupMessage, BackupSpec, SnapshotInfo};
use crate::sys::{cmd, host};

enum Password {
    Value(Secret),
    File(PathBuf),
}

pub struct Restic {
    bin: PathBuf,
    repository: String,
    password: Password,
    /// Local repositories are created on first use; remote ones by `ag-box init`.
    local_dir: Option<PathBuf>,
}

const LOCKED: &str = "repository is already locked";

impl Restic {
    /// The embedded store's repository under `$BOX_STATE_DIR/restic`.
    pub fn local(config: &Config) -> Result<Restic> {
        let bin = cmd::require("restic")?;
        let dir = config.state_dir.join("restic");
        let password = match &config.restic_password {
            Some(p) => Password::Value(p.clone()),
            None => Password::File(config.state_dir.join("restic-password")),
        };
        Ok(Restic {
            bin,
            repository: dir.to_string_lossy().into_owned(),
            password,
            local_dir: Some(dir),
        })
    }

    pub fn describe(&self) -> &str {
        &self.repository
    }

    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args);
        for var in [
            "RESTIC_REPOSITORY",
            "RESTIC_PASSWORD",
            "RESTIC_PASSWORD_FILE",
            "RESTIC_PASSWORD_COMMAND",
        ] {
            c.env_remove(var);
        }
        c.env("RESTIC_REPOSITORY", &self.repository);
        match &self.password {
            Password::Value(s) => c.env("RESTIC_PASSWORD", s.expose()),
            Password::File(p) => c.env("RESTIC_PASSWORD_FILE", p),
        };
        c
    }

    /// Create the local repository (and its generated password file) on first use.
    pub fn ensure_repo(&self) -> Result<()> {
        let Some(dir) = &self.local_dir else {
            return Ok(());
        };
        if dir.join("config").exists() {
            return Ok(());
        }
        if let Password::File(p) = &self.password {
            write_new_password(p)?;
        }
        tracing::info!("creating the restic repository {}", dir.display());
        cmd::output(&mut self.command(&["init".into()]))
            .with_context(|| format!("initialising restic repository {}", dir.display()))?;
        Ok(())
    }

    /// Run restic; on a stale lock, `restic unlock` (stale locks only) and try once more.
    fn run(&self, args: &[String], on_line: &mut dyn FnMut(&str)) -> Result<i32> {
        for attempt in 0..2 {
            let mut child = self
                .command(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("running restic {}", args[0]))?;
            let mut stderr = child.stderr.take().context("restic stderr")?;
            let err_reader = std::thread::spawn(move || {
                let mut s = String::new();
                let _ = stderr.read_to_string(&mut s);
                s
            });
            if let Some(out) = child.stdout.take() {
                for line in BufReader::new(out).lines() {
                    on_line(&line.context("reading restic output")?);
                }
            }
            let status = child.wait().context("waiting for restic")?;
            let err_text = err_reader.join().unwrap_or_default();
            let code = cmd::exit_code(status);
            if code == 0 {
                return Ok(0);
            }
            if attempt == 0 && err_text.contains(LOCKED) {
                tracing::warn!("restic repository is locked; removing stale locks and retrying");
                cmd::output(&mut self.command(&["unlock".into()]))?;
                continue;
            }
            if err_text.contains("Is there a repository at the following location?")
                || err_text.contains("unable to open config file")
            {
                return Err(UserError::failed(
                    format!("restic repository {} does not exist", self.repository),
                    "run 'ag-box init' to create it",
                )
                .into());
            }
            // restic 3: some source files could not be read; the snapshot exists anyway.
            if code == 3 && args[0] == "backup" {
                tracing::warn!(
                    "restic could not read some files: {}",
                    cmd::last_line(&err_text)
                );
                return Ok(3);
            }
            bail!(
                "restic {} failed (exit {code}): {}",
                args[0],
                cmd::last_line(&err_text)
            );
        }
        bail!("restic {}: repository still locked after unlock", args[0])
    }

    /// Back up; returns the new snapshot id.
    pub fn backup(&self, spec: &BackupSpec) -> Result<String> {
        let bar = progress_bar(&format!("snapshot {}", spec.name));
        let mut id = None;
        self.run(&plan::backup_args(spec), &mut |line| match plan::parse_backup_line(line) {
            Some(BackupMessage::Status { percent_done, .. }) => {
                if let Some(b) = &bar {
                    b.set_position((percent_done * 100.0) as u64);
                }
            }
            Some(BackupMessage::Summary { snapshot_id, files_new, files_changed, data_added }) => {
                tracing::info!(
                    "snapshot {} of {}: {files_new} new, {files_changed} changed files, {data_added} bytes added",
                    short(&snapshot_id),
                    spec.name
                );
                id = Some(snapshot_id);
            }
            _ => {}
        })?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        id.with_context(|| format!("restic backup of {} printed no snapshot id", spec.name))
    }

    pub fn restore(&self, snapshot_id: &str, target: &Path) -> Result<()> {
        let bar = progress_bar(&format!("restore {}", short(snapshot_id)));
        if let Some(b) = &bar {
            b.enable_steady_tick(Duration::from_millis(200));
        }
        let result = self.run(&plan::restore_args(snapshot_id, target), &mut |_| {});
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        result.map(|_| ())
    }

    pub fn snapshots(&self, tag: Option<&str>) -> Result<Vec<SnapshotInfo>> {
        let mut text = String::new();
        self.run(&plan::snapshots_args(tag), &mut |l| {
            text.push_str(l);
            text.push('\n');
        })?;
        serde_json::from_str(text.trim()).context("parsing restic snapshots --json")
    }

    /// Paths of one snapshot, as recorded by restic.
    pub fn snapshot(&self, id: &str, tag: &str) -> Result<SnapshotInfo> {
        self.snapshots(Some(tag))?
            .into_iter()
            .find(|s| s.id == id || s.id.starts_with(id))
            .with_context(|| format!("snapshot {} not found in {}", short(id), self.repository))
    }
}

pub fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

fn progress_bar(label: &str) -> Option<ProgressBar> {
    if !host::stderr_is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(100);
    let style = ProgressStyle::with_template("{spinner} {prefix} [{bar:30}] {pos}% {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    Some(bar)
}

fn write_new_password(path: &Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(());
    }
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{text}")?;
    tracing::warn!(
        "generated the repository password {}; back it up: without it no snapshot can be read",
        path.display()
    );
    Ok(())
}
