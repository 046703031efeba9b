//! restic, shelled out: repository access, backup with progress, restore, listing.
//! Secrets reach restic through its environment only.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::atomic;
use crate::config::{Config, Secret};
use crate::error::UserError;
use crate::plan::delta::{self, Change, Listed};
use crate::plan::diff::{self, FileEntry};
use crate::plan::history;
use crate::plan::restic::{
    self as plan, BackupSpec, ChangesSpec, ProgressMessage, Repository, SnapshotInfo, Version,
    box_tag,
};
use crate::plan::restic_key;
use crate::plan::snapshot_id::SnapshotId;
use crate::store::RepositoryKeys;
use crate::sys::ports::{Backup, Feed};
use crate::sys::{changes_archive, cmd, host, interrupt};

enum Password {
    Value(Secret),
    File(PathBuf),
}

pub(crate) struct Restic {
    bin: PathBuf,
    which: Repository,
    repository: String,
    password: Password,
    /// Keys and region for an `s3:` repository.
    s3: Option<(Secret, Secret, String)>,
    /// Local repositories are created on first use; remote ones by `ag-box init`.
    local_dir: Option<PathBuf>,
    /// Where the version of `bin` is remembered.
    version_cache: PathBuf,
    /// This node's own key of the repository ([`restic_key`]), and where it is kept.
    node_key: Option<NodeKey>,
    node_key_file: PathBuf,
    /// Where the lists of paths a changes snapshot holds are written (`backup_changes`).
    state_dir: PathBuf,
    /// The node key was refused (removed from the repository): the operator's password serves.
    node_key_refused: AtomicBool,
    /// The key the operator's password is tried on first.
    operator_hint: Option<String>,
    /// How long a command waits for a lock another restic holds (`BOX_LOCK_WAIT`).
    lock_wait: Duration,
}

const VERSION_CACHE: &str = "restic-version.json";
/// Where versions that sealed published deltas kept the repository's master key.
const KEPT_MASTER_KEY: &str = "restic-master-key.json";

/// A key of the repository that only this node uses; its password is random.
#[derive(serde::Serialize, serde::Deserialize)]
struct NodeKey {
    repository: String,
    id: String,
    /// Never in argv or a log line, like the operator's.
    password: String,
}

const WRONG_PASSWORD: &str = "wrong password or no key found";

fn missing_repository(stderr: &str) -> bool {
    stderr.contains("Is there a repository at the following location?")
        || stderr.contains("unable to open config file")
}

impl Restic {
    /// The main repository: `s3:<endpoint>/<bucket>/restic` with the S3 store, else
    /// `$BOX_STATE_DIR/restic`.
    pub(crate) fn new(config: &Config) -> Result<Restic> {
        Restic::open(config, Repository::Main)
    }

    /// Repository `which`: its dir (`Repository::dir`) in the bucket or in `$BOX_STATE_DIR`.
    /// Both open with the operator's `RESTIC_PASSWORD` (or the local password file).
    pub(crate) fn open(config: &Config, which: Repository) -> Result<Restic> {
        let bin = cmd::require("restic")?;
        let (repository, password, s3, local_dir) = if let Some(s3) = &config.s3 {
            let password = config
                .restic_password
                .clone()
                .context("RESTIC_PASSWORD is required with S3")?;
            (
                format!("s3:{}/{}/{}", s3.endpoint, s3.bucket, which.dir()),
                Password::Value(password),
                Some((
                    s3.access_key_id.clone(),
                    s3.secret_access_key.clone(),
                    s3.region.clone(),
                )),
                None,
            )
        } else {
            let dir = config.state_dir.join(which.dir());
            let password = match &config.restic_password {
                Some(p) => Password::Value(p.clone()),
                None => Password::File(config.state_dir.join("restic-password")),
            };
            (
                dir.to_string_lossy().into_owned(),
                password,
                None,
                Some(dir),
            )
        };
        Ok(Restic {
            bin,
            which,
            repository,
            password,
            s3,
            local_dir,
            version_cache: config.state_dir.join(VERSION_CACHE),
            node_key: None,
            node_key_file: config.state_dir.join(which.node_key_file()),
            state_dir: config.state_dir.clone(),
            node_key_refused: AtomicBool::new(false),
            operator_hint: None,
            lock_wait: config.lock_wait,
        }
        .with_node_key())
    }

    /// Use this node's key when it has one for this repository. (And remove the master key an
    /// earlier version kept: nothing reads it now.)
    fn with_node_key(mut self) -> Restic {
        match std::fs::remove_file(self.state_dir.join(KEPT_MASTER_KEY)) {
            Ok(()) => tracing::info!("removed the restic master key an earlier version kept"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("could not remove {KEPT_MASTER_KEY}: {e}"),
        }
        self.node_key = std::fs::read(&self.node_key_file)
            .ok()
            .and_then(|b| serde_json::from_slice::<NodeKey>(&b).ok())
            .filter(|k| k.repository == self.repository);
        self
    }

    /// Give this node a key of its own ([`restic_key`]) unless it has one: restic then opens
    /// the repository in milliseconds instead of half a second. The master key comes from
    /// `restic cat masterkey` with the operator's password; the key file goes into the
    /// repository's `keys/` (the bucket's `restic/keys/`, through `store`). Any failure leaves
    /// the operator's password in use.
    pub(crate) fn add_node_key(&mut self, store: &dyn RepositoryKeys, node: &str) {
        if self.node_key().is_some() {
            return;
        }
        let keys = match self.repository_keys(store) {
            // No repository there (before `ag-box init`): the key comes with a later command.
            Ok(keys) if keys.is_empty() => {
                tracing::debug!("no node key yet: {} has no keys", self.repository);
                return;
            }
            Ok(keys) => keys,
            Err(e) => {
                tracing::debug!("no node key yet: {e:#}");
                return;
            }
        };
        let (operator, earlier) = restic_key::sort_keys(&keys, node);
        self.operator_hint = operator;
        match self.make_node_key(store, node) {
            Ok(Some(key)) => {
                // A reinstalled node's keys: unused, and restic tries 20 keys at most.
                for id in earlier.iter().filter(|id| **id != key.id) {
                    if let Err(e) = self.delete_repository_key(store, id) {
                        tracing::warn!(
                            "could not remove this node's earlier key {}: {e:#}",
                            short(id)
                        );
                    }
                }
                self.node_key = Some(key);
                self.node_key_refused.store(false, Ordering::Relaxed);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "could not add this node's key to the restic repository {} (the operator's password serves): {e:#}",
                self.repository
            ),
        }
    }

    fn repository_keys(&self, store: &dyn RepositoryKeys) -> Result<Vec<(String, Vec<u8>)>> {
        let Some(dir) = &self.local_dir else {
            return store.repository_keys(self.which);
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir.join("keys")).context("listing the repository's keys")? {
            let entry = entry?;
            let id = entry.file_name().to_string_lossy().into_owned();
            out.push((id, std::fs::read(entry.path())?));
        }
        Ok(out)
    }

    fn delete_repository_key(&self, store: &dyn RepositoryKeys, id: &str) -> Result<()> {
        match &self.local_dir {
            Some(dir) => atomic::remove(&dir.join("keys").join(id)),
            None => store.delete_repository_key(self.which, id),
        }
    }

    fn make_node_key(&self, store: &dyn RepositoryKeys, node: &str) -> Result<Option<NodeKey>> {
        let out = self
            .command(&["cat".into(), "masterkey".into(), "--no-lock".into()])
            .stdin(Stdio::null())
            .output()
            .context("running restic cat masterkey")?;
        if !out.status.success() {
            // No repository yet (before `ag-box init`): the key comes with a later command.
            tracing::debug!(
                "no node key yet: {}",
                cmd::last_line(&String::from_utf8_lossy(&out.stderr))
            );
            return Ok(None);
        }
        let mut random = restic_key::Randomness {
            salt: [0; 64],
            iv: [0; 16],
        };
        let mut password = [0u8; 32];
        for bytes in [&mut random.salt[..], &mut random.iv[..], &mut password[..]] {
            host::random_bytes(bytes)?;
        }
        let password = crate::plan::text::hex(&password);
        // The system clock, as restic stamps the key files it writes itself.
        let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let (id, bytes) =
            restic_key::key_file(&out.stdout, password.as_bytes(), &random, &created, node)?;
        match &self.local_dir {
            Some(dir) => atomic::write(&dir.join("keys").join(&id), &bytes, 0o400)?,
            None => store.put_repository_key(self.which, &id, &bytes)?,
        }
        let key = NodeKey {
            repository: self.repository.clone(),
            id,
            password,
        };
        let bytes = serde_json::to_vec(&key)?;
        if !atomic::create_new(&self.node_key_file, &bytes, 0o600)? {
            let kept = std::fs::read(&self.node_key_file)
                .ok()
                .and_then(|b| serde_json::from_slice::<NodeKey>(&b).ok());
            match kept {
                // Two first commands at once: the key that landed first serves (the other
                // stays unused).
                Some(k) if k.repository == self.repository => return Ok(Some(k)),
                // The key of the repository under another address (BOX_S3_ENDPOINT changed):
                // kept, it would cost every later command a `restic cat masterkey` and a key.
                _ => atomic::write(&self.node_key_file, &bytes, 0o600)?,
            }
        }
        tracing::info!(
            "added this node's key {} to the restic repository {}",
            short(&key.id),
            self.repository
        );
        Ok(Some(key))
    }

    /// The repository's master key (`restic_key::master_keys`), from this node's own key
    /// file (a cheap scrypt); None where this node has none. With `or_restic`, restic is asked
    /// for it instead (`restic cat masterkey`, with the operator's password: half a second).
    pub(crate) fn master_keys(
        &self,
        store: &dyn RepositoryKeys,
        or_restic: bool,
    ) -> Result<Option<restic_key::Keys>> {
        if let Some(key) = self.node_key() {
            let opened = self.node_master_keys(store, key);
            match opened {
                Ok(keys) => return Ok(Some(keys)),
                Err(e) if or_restic => {
                    // The operator's password serves from here on, as where restic refuses it.
                    tracing::warn!(
                        "this node's key of {} did not open ({e:#}); the operator's password serves",
                        self.repository
                    );
                    self.node_key_refused.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        } else if !or_restic {
            return Ok(None);
        }
        let out = self
            .command(&["cat".into(), "masterkey".into(), "--no-lock".into()])
            .stdin(Stdio::null())
            .output()
            .context("running restic cat masterkey")?;
        let master = zeroize::Zeroizing::new(out.stdout);
        if !out.status.success() {
            bail!(
                "restic cat masterkey failed: {}",
                cmd::last_line(&String::from_utf8_lossy(&out.stderr))
            );
        }
        restic_key::master_keys(&master).map(Some)
    }

    /// The master key, from this node's own key file `key`.
    fn node_master_keys(
        &self,
        store: &dyn RepositoryKeys,
        key: &NodeKey,
    ) -> Result<restic_key::Keys> {
        let file = match &self.local_dir {
            Some(dir) => {
                let path = dir.join("keys").join(&key.id);
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?
            }
            None => store
                .repository_key(self.which, &key.id)?
                .with_context(|| format!("this node's key {} is gone", short(&key.id)))?,
        };
        let master = restic_key::open_key_file(&file, key.password.as_bytes())?;
        restic_key::master_keys(&master)
    }

    /// The id of this node's own key, when it opens the repository.
    pub(crate) fn node_key_id(&self) -> Option<&str> {
        self.node_key().map(|k| k.id.as_str())
    }

    fn node_key(&self) -> Option<&NodeKey> {
        self.node_key
            .as_ref()
            .filter(|_| !self.node_key_refused.load(Ordering::Relaxed))
    }

    /// Which of the two repositories this is.
    pub(crate) fn which(&self) -> Repository {
        self.which
    }

    pub(crate) fn describe(&self) -> &str {
        &self.repository
    }

    fn command(&self, args: &[String]) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new(&self.bin);
        c.args(args);
        // Ctrl-C and a terminal's hangup reach ag-box alone, which passes them on as SIGINT
        // and outlives restic (`interrupt::Shield`); a SIGHUP would kill restic holding its lock.
        c.process_group(0);
        for var in [
            "RESTIC_REPOSITORY",
            "RESTIC_PASSWORD",
            "RESTIC_PASSWORD_FILE",
            "RESTIC_PASSWORD_COMMAND",
        ] {
            c.env_remove(var);
        }
        c.env("RESTIC_REPOSITORY", &self.repository);
        // Snapshot times in UTC ("...Z"), so they parse the same on every node.
        c.env("TZ", "UTC");
        // restic's --json status lines come once a minute unless asked for more (a bar here,
        // a line every few seconds off a terminal).
        c.env("RESTIC_PROGRESS_FPS", "4");
        c.env_remove("RESTIC_KEY_HINT");
        match (self.node_key(), &self.password) {
            (Some(key), _) => c
                .env("RESTIC_PASSWORD", &key.password)
                .env("RESTIC_KEY_HINT", &key.id),
            (None, Password::Value(s)) => c.env("RESTIC_PASSWORD", s.expose()),
            (None, Password::File(p)) => c.env("RESTIC_PASSWORD_FILE", p),
        };
        if let (None, Some(hint)) = (self.node_key(), &self.operator_hint) {
            c.env("RESTIC_KEY_HINT", hint);
        }
        if let Some((key_id, secret, region)) = &self.s3 {
            c.env("AWS_ACCESS_KEY_ID", key_id.expose())
                .env("AWS_SECRET_ACCESS_KEY", secret.expose())
                .env("AWS_DEFAULT_REGION", region);
        }
        c
    }

    /// Does the repository exist? (An unreachable one is an error, not a "no".)
    pub(crate) fn exists(&self) -> Result<bool> {
        if let Some(dir) = &self.local_dir {
            return Ok(dir.join("config").exists());
        }
        let out = self.output(&["cat".into(), "config".into(), "--no-lock".into()])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.success() {
            true => Ok(true),
            false if missing_repository(&stderr) => Ok(false),
            false => bail!(
                "restic cannot open {}: {}",
                self.repository,
                cmd::last_line(&stderr)
            ),
        }
    }

    /// Create the repository when it does not exist yet; true when it was created.
    pub(crate) fn init(&self) -> Result<bool> {
        if self.exists()? {
            return Ok(false);
        }
        if let Password::File(p) = &self.password {
            write_new_password(p)?;
        }
        tracing::info!("creating the restic repository {}", self.repository);
        cmd::output(&mut self.command(&["init".into()]))
            .with_context(|| format!("initialising restic repository {}", self.repository))?;
        Ok(true)
    }

    /// The local repository is created on first use; a remote one only by `ag-box init`.
    pub(crate) fn ensure_repo(&self) -> Result<()> {
        if self.local_dir.is_some() {
            self.init()?;
        }
        Ok(())
    }

    /// Like `ensure_repo`, but also checks that a remote repository is there.
    pub(crate) fn require_repo(&self) -> Result<()> {
        self.ensure_repo()?;
        if self.exists()? {
            return Ok(());
        }
        Err(self.missing().into())
    }

    fn missing(&self) -> UserError {
        UserError::failed(
            format!("restic repository {} does not exist", self.repository),
            "run 'ag-box init'",
        )
    }

    /// restic started with `args`, its stdin `input` (stdout `output`, stderr piped), and what
    /// passes signals on to it, made before it starts.
    fn spawn(
        &self,
        args: &[String],
        input: Stdio,
        output: Stdio,
    ) -> Result<(interrupt::Shield, Child)> {
        let mut shield = interrupt::Shield::new();
        let child = self
            .command(args)
            .stdin(input)
            .stdout(output)
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running restic {}", args[0]))?;
        shield.forward_to(child.id());
        Ok((shield, child))
    }

    /// Run restic for its output (what it said, in full), falling back to the operator's
    /// password when this node's key is refused.
    fn output(&self, args: &[String]) -> Result<std::process::Output> {
        loop {
            let (shield, child) = self.spawn(args, Stdio::null(), Stdio::piped())?;
            let out = child.wait_with_output().context("waiting for restic")?;
            shield.end(&format!("restic {} ended", args[0]))?;
            if out.status.success()
                || !self.refused_node_key(&String::from_utf8_lossy(&out.stderr))?
            {
                return Ok(out);
            }
        }
    }

    /// Whether restic's `stderr` says this node's key no longer opens the repository (removed
    /// from it); then it is forgotten, and the operator's password serves from here on.
    fn refused_node_key(&self, stderr: &str) -> Result<bool> {
        if !stderr.contains(WRONG_PASSWORD) || self.node_key().is_none() {
            return Ok(false);
        }
        tracing::warn!(
            "the restic repository {} refused this node's key (removed?); using the operator's password",
            self.repository
        );
        self.node_key_refused.store(true, Ordering::Relaxed);
        atomic::remove(&self.node_key_file)?;
        Ok(true)
    }

    /// Run restic. When another restic holds the lock it needs: `restic unlock` (stale locks
    /// only) and try again, then again while the lock is held, for up to `BOX_LOCK_WAIT` (another
    /// node's daily prune holds the repository whole for a while).
    /// Returns what restic said on stderr when a backup could not read everything (exit 3).
    fn run(&self, args: &[String], on_line: &mut dyn FnMut(&str)) -> Result<Option<String>> {
        self.run_fed(args, None, None, on_line)
    }

    /// [`Restic::run`], with what `feed` writes on restic's stdin (written again on a retry),
    /// in the process started `ahead` first, when one was.
    fn run_fed(
        &self,
        args: &[String],
        mut ahead: Option<Ahead>,
        feed: Option<&Feed<'_>>,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<Option<String>> {
        let mut unlocked = false;
        let mut waiting: Option<Instant> = None;
        let mut pause = Duration::from_secs(1);
        loop {
            let input = if feed.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            };
            let (shield, mut child) = match ahead.as_mut().and_then(Ahead::take) {
                Some(started) => started,
                None => self.spawn(args, input, Stdio::piped())?,
            };
            let mut stderr = child.stderr.take().context("restic stderr")?;
            let err_reader = std::thread::spawn(move || {
                let mut s = String::new();
                let _ = stderr.read_to_string(&mut s);
                s
            });
            let written = exchange(&mut child, feed, on_line);
            let status = child.wait().context("waiting for restic")?;
            let err_text = err_reader.join().unwrap_or_default();
            shield.end(&format!("restic {} ended", args[0]))?;
            let unwritten = written?.and_then(Result::err);
            let code = cmd::exit_code(status);
            if code == 0 && unwritten.is_none() {
                return Ok(None);
            }
            if let Some(holder) = plan::lock_holder(&err_text) {
                if !unlocked {
                    tracing::warn!(
                        "restic repository is locked; removing stale locks and retrying"
                    );
                    cmd::output(&mut self.command(&["unlock".into()]))?;
                    unlocked = true;
                    continue;
                }
                let wait = humantime::format_duration(self.lock_wait);
                let since = *waiting.get_or_insert_with(|| {
                    say!("the restic repository is {holder}; waiting up to {wait} for it");
                    Instant::now()
                });
                let left = self.lock_wait.saturating_sub(since.elapsed());
                if left.is_zero() {
                    return Err(UserError::failed(
                        format!("restic {}: the repository is {holder}", args[0]),
                        format!(
                            "that is another node's prune or snapshot, or one cut off (restic counts a lock stale after 30 minutes); run the command again later (waited {wait}; BOX_LOCK_WAIT sets how long)"
                        ),
                    )
                    .into());
                }
                // `up` notes Ctrl-C instead of dying: it stops waiting here.
                interrupt::check("the repository's lock was free")?;
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_secs(15));
                continue;
            }
            if self.refused_node_key(&err_text)? {
                continue;
            }
            if missing_repository(&err_text) {
                return Err(self.missing().into());
            }
            if let Some(e) = unwritten {
                spawn_beside(&mut self.unlock_beside());
                return Err(e.context(format!("restic {} was stopped", args[0])));
            }
            // restic 3: some source files could not be read; the snapshot exists anyway.
            if code == 3 && args[0] == "backup" {
                return Ok(Some(err_text));
            }
            bail!(
                "restic {} failed (exit {code}): {}",
                args[0],
                cmd::last_line(&err_text)
            );
        }
    }

    /// Run a planned `restic backup --json`; `label` names what is saved.
    pub(crate) fn backup(&self, label: &str, args: &[String]) -> Result<Backup> {
        self.backup_fed(label, args, None, None)
    }

    /// [`Restic::backup`] of what `feed` writes (`--stdin`), in the process started `ahead`
    /// for it, when one was.
    fn backup_fed(
        &self,
        label: &str,
        args: &[String],
        ahead: Option<Ahead>,
        feed: Option<&Feed<'_>>,
    ) -> Result<Backup> {
        let mut progress = Progress::new(format!("snapshot {label}"));
        let mut summary = None;
        let result = self.run_fed(
            args,
            ahead,
            feed,
            &mut |line| match plan::parse_progress_line(line) {
                Some(s @ ProgressMessage::Summary { .. }) => summary = Some(s),
                Some(status) => progress.show(&status),
                None => {}
            },
        );
        progress.finish();
        let unreadable = plan::unreadable_items(result?.as_deref().unwrap_or(""));
        match summary {
            Some(ProgressMessage::Summary {
                snapshot_id,
                files_new,
                files_changed,
                data_added,
            }) => {
                tracing::info!(
                    "snapshot {} of {label}: {files_new} new, {files_changed} changed files, {} added",
                    snapshot_id.short(),
                    crate::plan::history::size(data_added),
                );
                if !unreadable.is_empty() {
                    tracing::warn!(
                        "snapshot {} of {label} is partial: restic could not read {}",
                        snapshot_id.short(),
                        unreadable.join("; ")
                    );
                }
                Ok(Backup {
                    id: self.full_id(snapshot_id),
                    repository: self.which,
                    unreadable,
                    files_added: files_new + files_changed,
                    bytes_added: data_added,
                })
            }
            _ => anyhow::bail!("restic backup of {label} printed no snapshot id"),
        }
    }

    /// The full id of a snapshot restic named by its short id (0.14's backup summary does):
    /// records and `--json` hold full ids. Kept short when restic cannot say.
    fn full_id(&self, id: SnapshotId) -> SnapshotId {
        if id.as_str().len() >= 64 {
            return id;
        }
        match self.snapshots_named(&id) {
            Ok(found) => match found.as_slice() {
                [one] => one.id.clone(),
                _ => id,
            },
            Err(e) => {
                tracing::debug!("the full id of snapshot {id}: {e:#}");
                id
            }
        }
    }

    /// A restore, its progress shown as `label`.
    fn run_with_progress(&self, args: &[String], label: String) -> Result<()> {
        let mut progress = Progress::new(label);
        let result = self.run(args, &mut |line| {
            if let Some(status) = plan::parse_progress_line(line) {
                progress.show(&status);
            }
        });
        progress.finish();
        result.map(|_| ())
    }

    /// Free the space of forgotten snapshots (takes the repository's exclusive lock).
    pub(crate) fn prune(&self) -> Result<()> {
        self.run(&["prune".into()], &mut |_| {}).map(|_| ())
    }

    pub(crate) fn restore(&self, snapshot_id: &SnapshotId, target: &Path) -> Result<()> {
        let args = plan::restore_args(snapshot_id, target, self.restores_sparse());
        self.run_with_progress(&args, format!("restore {}", snapshot_id.short()))
    }

    /// Restore only `paths` of a snapshot under `target`: by one restic process, or past a few
    /// hundred paths by several side by side (`plan::delta::fetch_batches`). Each writes files
    /// of its own; dirs they share are made by whichever comes first.
    pub(crate) fn restore_only(
        &self,
        snapshot_id: &SnapshotId,
        target: &Path,
        paths: &[PathBuf],
    ) -> Result<()> {
        let width = std::thread::available_parallelism().map_or(2, usize::from);
        let batches = delta::fetch_batches(paths, width);
        for wave in batches.chunks(width) {
            let mut children = Vec::new();
            for batch in wave {
                let args = delta::fetch_args(snapshot_id, target, batch, self.restores_sparse());
                children.push(self.spawn(&args, Stdio::null(), Stdio::null())?);
            }
            let mut failed = None;
            for (shield, child) in children {
                let out = child.wait_with_output().context("waiting for restic")?;
                drop(shield);
                if !out.status.success() && failed.is_none() {
                    failed = Some(format!(
                        "restic restore failed (exit {}): {}",
                        cmd::exit_code(out.status),
                        cmd::last_line(&String::from_utf8_lossy(&out.stderr))
                    ));
                }
            }
            interrupt::check("restic restore ended")?;
            if let Some(why) = failed {
                bail!(why);
            }
        }
        Ok(())
    }

    /// Bring `path` to what snapshot `snapshot_id` holds there, in place (restic 0.17+).
    pub(crate) fn restore_path(
        &self,
        snapshot_id: &SnapshotId,
        path: &Path,
        excludes: &[PathBuf],
        exclude_files: &[PathBuf],
    ) -> Result<()> {
        let args = plan::restore_in_place_args(snapshot_id, path, excludes, exclude_files);
        self.run_with_progress(&args, format!("restore {} in place", snapshot_id.short()))
    }

    /// The version of the restic binary in use: asked once, then remembered for as long as the
    /// binary's size and time stay the same. None when it cannot be told.
    fn restores_sparse(&self) -> bool {
        self.version().is_some_and(Version::restores_sparse)
    }

    pub(crate) fn version(&self) -> Option<Version> {
        let stamp = std::fs::metadata(&self.bin).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.size(), m.mtime(), m.mtime_nsec())
        })?;
        let cached: Option<VersionSeen> = std::fs::read(&self.version_cache)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(seen) = cached.filter(|c| c.bin == self.bin && c.stamp == stamp) {
            return Some(seen.version);
        }
        let out = Command::new(&self.bin)
            .arg("version")
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let version = plan::parse_version(&String::from_utf8_lossy(&out.stdout))?;
        let seen = VersionSeen {
            bin: self.bin.clone(),
            stamp,
            version,
        };
        if let Err(e) = serde_json::to_vec(&seen)
            .map_err(anyhow::Error::from)
            .and_then(|b| atomic::write(&self.version_cache, &b, 0o644))
        {
            tracing::warn!("could not remember the restic version: {e:#}");
        }
        Some(version)
    }

    /// The box's snapshot whose id starts with `prefix`.
    pub(crate) fn find(&self, name: &str, prefix: &str) -> Result<SnapshotInfo> {
        let snaps = self.snapshots(Some(&box_tag(name)))?;
        Ok(plan::find_snapshot(&snaps, name, prefix)?.clone())
    }

    /// The files and symlinks snapshot `id` holds.
    pub(crate) fn files(&self, id: &SnapshotId) -> Result<Vec<FileEntry>> {
        let mut files = Vec::new();
        let args = ["ls", "--json", "--no-lock", id.as_str()].map(String::from);
        self.run(&args, &mut |line| {
            files.extend(diff::parse_ls_line(line));
        })?;
        Ok(files)
    }

    /// The repository's locks (`list locks`, then each one's JSON).
    pub(crate) fn locks(&self) -> Result<Vec<LockInfo>> {
        let mut ids = Vec::new();
        self.run(
            &["list".into(), "locks".into(), "--no-lock".into()],
            &mut |l| ids.push(l.trim().to_string()),
        )?;
        let mut out = Vec::new();
        for id in ids.iter().filter(|i| !i.is_empty()) {
            let mut text = String::new();
            // A lock can go away between the listing and the read: then it is not one.
            let read = self.run(
                &["cat".into(), "lock".into(), "--no-lock".into(), id.clone()],
                &mut |l| text.push_str(l),
            );
            if read.is_ok()
                && let Ok(lock) = serde_json::from_str::<LockInfo>(&text)
            {
                out.push(lock);
            }
        }
        Ok(out)
    }

    /// Remove stale locks only (restic's own judgement).
    pub(crate) fn unlock(&self) -> Result<()> {
        self.run(&["unlock".into()], &mut |_| {}).map(|_| ())
    }

    /// The snapshot `id` names (a prefix), as `restic snapshots <id>` lists it.
    fn snapshots_named(&self, id: &SnapshotId) -> Result<Vec<SnapshotInfo>> {
        self.listed_snapshots(&plan::snapshot_named_args(id))
    }

    pub(crate) fn snapshots(&self, tag: Option<&str>) -> Result<Vec<SnapshotInfo>> {
        self.listed_snapshots(&plan::snapshots_args(tag))
    }

    /// What a `restic snapshots --json ...` run lists.
    fn listed_snapshots(&self, args: &[String]) -> Result<Vec<SnapshotInfo>> {
        let mut text = String::new();
        self.run(args, &mut |l| {
            text.push_str(l);
            text.push('\n');
        })?;
        serde_json::from_str(text.trim()).context("parsing restic snapshots --json")
    }
}

/// The version a restic binary said it was, and the binary's size and time then.
#[derive(serde::Serialize, serde::Deserialize)]
struct VersionSeen {
    bin: PathBuf,
    stamp: (u64, i64, i64),
    version: Version,
}

/// One of `restic cat lock`'s fields.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LockInfo {
    pub time: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub pid: i64,
}

/// What the sequences' port (`sys::repositories`) asks of one repository.
impl Restic {
    /// A snapshot as `spec` says; one whose parent the repository does not hold (a prune
    /// forgot it, or it is a quick park's changes, kept in the repository of changes) is taken
    /// with the parent restic picks itself (the box's latest of the same paths), never refused.
    /// restic says so in words that differ by version and backend: the box's snapshots are
    /// listed instead, and only once it failed.
    pub(crate) fn backup_box(&self, spec: &BackupSpec) -> Result<Backup> {
        let taken = self.backup(&spec.name, &plan::backup_args(spec, self.version()));
        let (Err(_), Some(parent)) = (&taken, &spec.parent) else {
            return taken;
        };
        let held = self.snapshots(Some(&box_tag(&spec.name))).map(|all| {
            all.iter()
                .any(|s| s.id.as_str().starts_with(parent.as_str()))
        });
        if interrupt::check("the snapshot").is_err() || !matches!(held, Ok(false)) {
            return taken;
        }
        tracing::warn!(
            "box '{}': its parent snapshot {} is not in {}; restic picks the parent itself",
            spec.name,
            parent.short(),
            self.repository
        );
        let alone = BackupSpec {
            parent: None,
            ..spec.clone()
        };
        self.backup(&spec.name, &plan::backup_args(&alone, self.version()))
    }

    /// A changes snapshot of the archive `feed` writes, in the process started `ahead` for it
    /// ([`Restic::start_changes`]), when one was.
    pub(crate) fn backup_changes(
        &self,
        spec: &ChangesSpec,
        ahead: Option<Ahead>,
        feed: &Feed<'_>,
    ) -> Result<Backup> {
        self.backup_fed(
            &format!("{} (what changed)", spec.name),
            &spec.args(),
            ahead,
            Some(feed),
        )
    }

    /// restic started for a changes snapshot before its archive is ready: it opens and locks
    /// the repository meanwhile.
    pub(crate) fn start_changes(&self, spec: &ChangesSpec) -> Result<Ahead> {
        Ok(Ahead {
            started: Some(self.spawn(&spec.args(), Stdio::piped(), Stdio::piped())?),
            unlock: self.unlock_beside(),
        })
    }

    /// `restic unlock`, run beside what follows, for the lock a restic stopped by SIGINT may
    /// leave: stopped while its lock file was being written, it never learns the write landed.
    /// Only this node's locks of ended processes go; another node meeting that lock meanwhile
    /// waits for it.
    fn unlock_beside(&self) -> Command {
        let mut unlock = self.command(&["unlock".into()]);
        unlock
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        unlock
    }

    /// Unpack the archive a changes snapshot holds at `archive` into `target` (an empty
    /// staging dir), as `restic dump` streams it.
    pub(crate) fn unpack_changes(
        &self,
        snapshot_id: &SnapshotId,
        archive: &Path,
        target: &Path,
    ) -> Result<()> {
        let args = plan::dump_args(snapshot_id, archive);
        let (shield, mut child) = self.spawn(&args, Stdio::null(), Stdio::piped())?;
        let mut stderr = child.stderr.take().context("restic stderr")?;
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let unpacked = child
            .stdout
            .take()
            .context("restic stdout")
            .and_then(|out| changes_archive::unpack(out, target));
        if unpacked.is_err() {
            let _ = child.kill();
        }
        let status = child.wait().context("waiting for restic")?;
        let err_text = err_reader.join().unwrap_or_default();
        shield.end("restic dump ended")?;
        if !status.success() {
            bail!(
                "restic dump failed (exit {}): {}",
                cmd::exit_code(status),
                cmd::last_line(&err_text)
            );
        }
        unpacked
    }

    pub(crate) fn box_snapshots(&self, name: &str) -> Result<Vec<SnapshotId>> {
        let tags = [plan::box_tag(name), plan::changes_tag(name)];
        Ok(self
            .listed_snapshots(&plan::snapshots_of_args(&tags))?
            .into_iter()
            .map(|s| s.id)
            .collect())
    }

    pub(crate) fn forget(&self, ids: &[SnapshotId]) -> Result<()> {
        plan::forget_runs(ids)
            .iter()
            .try_for_each(|args| self.run(args, &mut |_| {}).map(|_| ()))
    }

    pub(crate) fn changes(
        &self,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<(Vec<Change>, Vec<Listed>)> {
        // Both read the snapshots' trees; side by side, the second costs little more.
        std::thread::scope(|s| {
            let listing = s.spawn(|| self.listing(to));
            let mut changes = Vec::new();
            self.run(&delta::diff_args(from, to), &mut |line| {
                changes.extend(delta::parse_diff_line(line));
            })?;
            let listed = listing
                .join()
                .map_err(|_| anyhow::anyhow!("restic ls: its reader panicked"))??;
            Ok((changes, listed))
        })
    }

    pub(crate) fn listing(&self, snapshot_id: &SnapshotId) -> Result<Vec<Listed>> {
        let mut listed = Vec::new();
        self.run(&delta::ls_args(snapshot_id), &mut |line| {
            listed.extend(delta::parse_ls_line(line));
        })?;
        Ok(listed)
    }

    pub(crate) fn restores_in_place(&self) -> bool {
        self.version().is_some_and(Version::restores_in_place)
    }
}

/// restic started ahead of what it saves ([`Restic::start_changes`]); dropped unused, it
/// ends with nothing saved.
pub(crate) struct Ahead {
    /// The process, and what passes signals on to it from its start.
    started: Option<(interrupt::Shield, Child)>,
    /// [`Restic::unlock_beside`], run once it is stopped.
    unlock: Command,
}

impl Ahead {
    fn take(&mut self) -> Option<(interrupt::Shield, Child)> {
        self.started.take()
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        let Some((shield, mut child)) = self.started.take() else {
            return;
        };
        stop_saving(child.id());
        // Nothing reads what it writes: a full pipe would hold its end.
        drop((child.stdout.take(), child.stderr.take(), child.stdin.take()));
        let ended = child.wait().is_ok_and(|s| s.success());
        drop(shield);
        if !ended {
            spawn_beside(&mut self.unlock);
        }
    }
}

/// Start `command` and leave it to end on its own (reaped by a thread of its own while this
/// process lives).
fn spawn_beside(command: &mut Command) {
    match command.spawn() {
        Ok(mut child) => drop(std::thread::spawn(move || child.wait())),
        Err(e) => tracing::debug!("{command:?}: {e}"),
    }
}

/// What `feed` writes, written into restic's stdin while its stdout's lines go to `on_line`;
/// how the writing went (None: nothing to write).
fn exchange(
    child: &mut Child,
    feed: Option<&Feed<'_>>,
    on_line: &mut dyn FnMut(&str),
) -> Result<Option<Result<()>>> {
    let (stdin, pid) = (child.stdin.take(), child.id());
    let stdout = child.stdout.take();
    std::thread::scope(|s| -> Result<Option<Result<()>>> {
        let feeding = feed
            .zip(stdin)
            .map(|(feed, stdin)| s.spawn(move || feed_into(feed, stdin, pid)));
        if let Some(out) = stdout {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(line) => on_line(&line),
                    Err(e) => {
                        // The feeder may be writing to it: it ends too.
                        let _ = child.kill();
                        return Err(anyhow::Error::from(e).context("reading restic output"));
                    }
                }
            }
        }
        Ok(feeding.map(|f| {
            f.join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("writing into restic panicked")))
        }))
    })
}

/// `feed` written into restic's `stdin`, then closed; when writing fails, restic is stopped
/// first, so what it read is not saved.
fn feed_into(feed: &Feed<'_>, mut stdin: ChildStdin, pid: u32) -> Result<()> {
    let written = feed(&mut stdin);
    if written.is_err() {
        stop_saving(pid);
    } else {
        tracing::debug!("restic read what it saves but the last 64 KiB");
    }
    drop(stdin);
    written
}

/// SIGINT, with restic's input still open: an end of input first would have it save what it
/// read. restic 0.17+ reading its input then waits for that end, and saves nothing.
fn stop_saving(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        );
        // Its handler cancels the backup before the end of input arrives.
        std::thread::sleep(Duration::from_millis(30));
    }
}

pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// The progress bar, with a total known; and what is done so far, without one.
const BAR: &str = "{spinner} {prefix} [{bar:30}] {pos}% {elapsed}";
const COUNTER: &str = "{spinner} {prefix} {msg} {elapsed}";

/// A long restic run's progress: a bar on a terminal; otherwise (the journal, a timer, a pipe)
/// one line every [`line_every`] at most.
struct Progress {
    label: String,
    bar: Option<ProgressBar>,
    /// Whether the bar shows a total now (None: as it was made, with [`BAR`]).
    totalled: Option<bool>,
    last_line: Instant,
}

/// `AG_BOX_PROGRESS_EVERY` seconds (default 5) between progress lines off a terminal.
fn line_every() -> Duration {
    std::env::var("AG_BOX_PROGRESS_EVERY")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(5), Duration::from_secs_f64)
}

impl Progress {
    fn new(label: String) -> Progress {
        let bar = host::stderr_is_terminal().then(|| {
            let bar = ProgressBar::new(100);
            let style =
                ProgressStyle::with_template(BAR).unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(label.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            label,
            bar,
            totalled: None,
            last_line: Instant::now(),
        }
    }

    fn show(&mut self, message: &ProgressMessage) {
        let ProgressMessage::Status {
            percent_done,
            files_done,
            bytes_done,
            total_bytes,
        } = *message
        else {
            return;
        };
        // Without its scanner (`--no-scan`) restic knows no total: what is done is shown.
        let known_total = total_bytes > 0;
        if let Some(b) = &self.bar {
            // A scanner may count the total only after the first messages: the bar comes back.
            if self.totalled != Some(known_total) {
                let template = if known_total { BAR } else { COUNTER };
                if let Ok(style) = ProgressStyle::with_template(template) {
                    b.set_style(style);
                }
                self.totalled = Some(known_total);
            }
            if known_total {
                // A fraction in [0, 1], as a percentage.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                b.set_position((percent_done.clamp(0.0, 1.0) * 100.0) as u64);
            } else {
                b.set_message(format!("{files_done} files, {}", history::size(bytes_done)));
            }
        } else if self.last_line.elapsed() >= line_every() {
            self.last_line = Instant::now();
            if known_total {
                say!(
                    "ag-box: {}: {:.0}% ({files_done} files, {} of {})",
                    self.label,
                    percent_done * 100.0,
                    history::size(bytes_done),
                    history::size(total_bytes)
                );
            } else {
                say!(
                    "ag-box: {}: {files_done} files, {} so far",
                    self.label,
                    history::size(bytes_done)
                );
            }
        }
    }

    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

fn write_new_password(path: &Path) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let mut bytes = [0u8; 24];
    host::random_bytes(&mut bytes)?;
    let text = crate::plan::text::hex(&bytes);
    // Never a half-written password: a concurrent first use keeps the one that landed first.
    if atomic::create_new(path, format!("{text}\n").as_bytes(), 0o600)? {
        tracing::warn!(
            "generated the repository password {}; back it up: without it no snapshot can be read",
            path.display()
        );
    }
    Ok(())
}
