//! The proxy's decisions: one JSON line each, in the box's run dir (and on the proxy's stdout,
//! which is its unit's journal). The file is kept small by moving it to `.1` past a size.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Past this size the log moves to `egress.log.1` (the one before is dropped).
const ROTATE_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub time: String,
    #[serde(rename = "box")]
    pub box_name: String,
    pub host: String,
    pub port: u16,
    pub method: String,
    /// The request's path, without its query (a request the proxy saw: plain HTTP, or one the
    /// broker terminated); null for a tunnel.
    #[serde(default)]
    pub path: Option<String>,
    pub allowed: bool,
    /// The entry that admitted it.
    #[serde(default)]
    pub rule: Option<String>,
    /// Why it was refused.
    #[serde(default)]
    pub reason: Option<String>,
    /// Admitted, but the destination could not be reached or the exchange broke.
    #[serde(default)]
    pub error: Option<String>,
    /// From the box to the destination.
    pub bytes_out: u64,
    /// From the destination to the box.
    pub bytes_in: u64,
}

pub(crate) struct Writer {
    path: PathBuf,
    file: Mutex<File>,
    rotate_at: u64,
}

fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

fn rotated(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".1");
    PathBuf::from(p)
}

impl Writer {
    pub(crate) fn open(path: &Path) -> Result<Writer> {
        Ok(Writer {
            path: path.to_path_buf(),
            file: Mutex::new(open_append(path)?),
            rotate_at: ROTATE_BYTES,
        })
    }

    /// One line to the file and to stdout. A log that cannot be written never stops traffic.
    pub(crate) fn write(&self, record: &Record) {
        let Ok(mut line) = serde_json::to_string(record) else {
            return;
        };
        line.push('\n');
        out!("{}", line.trim_end());
        let Ok(mut file) = self.file.lock() else {
            return;
        };
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!("writing {}: {e}", self.path.display());
        }
        if file.metadata().is_ok_and(|m| m.len() > self.rotate_at) {
            let moved = fs::rename(&self.path, rotated(&self.path));
            match moved.and_then(|()| open_append(&self.path).map_err(std::io::Error::other)) {
                Ok(fresh) => *file = fresh,
                Err(e) => tracing::warn!("rotating {}: {e}", self.path.display()),
            }
        }
    }
}

fn records(path: &Path) -> Vec<Record> {
    let Ok(file) = File::open(path) else {
        return vec![];
    };
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// Every decision still kept, oldest first.
pub(crate) fn read(path: &Path) -> Vec<Record> {
    let mut all = records(&rotated(path));
    all.extend(records(path));
    all
}

/// Print each new line of the log as it comes, as `show` formats it; survives rotation.
pub(crate) fn follow(path: &Path, mut show: impl FnMut(&Record)) -> Result<()> {
    let mut file = open_read_end(path)?;
    let mut pending = String::new();
    loop {
        let mut reader = BufReader::new(&file);
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            pending.push_str(&line);
            line.clear();
            if pending.ends_with('\n') {
                if let Ok(r) = serde_json::from_str::<Record>(pending.trim_end()) {
                    show(&r);
                }
                pending.clear();
            }
        }
        let moved =
            fs::metadata(path).is_ok_and(|m| m.ino() != file.metadata().map_or(0, |f| f.ino()));
        if moved {
            file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn open_read_end(path: &Path) -> Result<File> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.seek(SeekFrom::End(0))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn record(port: u16, allowed: bool) -> Record {
        Record {
            time: "2026-11-30T00:00:00.000Z".into(),
            box_name: "b".into(),
            host: "example.com".into(),
            port,
            method: "CONNECT".into(),
            path: None,
            allowed,
            rule: allowed.then(|| "example.com".to_string()),
            reason: (!allowed).then(|| "example.com:22 is not listed".to_string()),
            error: None,
            bytes_out: 1,
            bytes_in: 2,
        }
    }

    #[test]
    fn one_json_line_each_read_back_across_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("egress.log");
        let w = Writer {
            rotate_at: 600,
            ..Writer::open(&path).unwrap()
        };
        let written: Vec<Record> = (1..=6).map(|i| record(i, i % 2 == 0)).collect();
        for r in &written {
            w.write(r);
        }
        assert!(rotated(&path).exists());
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.lines().all(|l| l.starts_with("{\"time\":")), "{text}");
        // What the rotation dropped is gone; the rest reads back in order.
        let back = read(&path);
        assert_eq!(back, written[written.len() - back.len()..].to_vec());
        assert!(back.len() >= 3, "{back:?}");
    }
}
