//! Where each item of a backlog stands now, as `ralph-ctl queue` (and
//! `status`) shows it: the source read as a worker would read it, each item
//! with this machine's claims ([`local`]), or with every machine's records on
//! a shared git remote ([`remote`]). Free, waiting (on items that have not
//! landed), claimed, or how it ended.

use std::collections::BTreeMap;

use ralph_core::paths::ProjectPaths;
use ralph_core::time::Timestamp;

use crate::error::{CtlError, RemoteDoing};
use crate::queue::claims::store::{ClaimStore, Claims, ItemRecord, ItemStatus};
use crate::queue::remote::{Record, Refused, Remote, RemoteBook};
use crate::queue::source::{Item, Source};

/// A backlog with this machine's claims file.
pub(crate) struct Local {
    /// The source, as given.
    pub(crate) source: Source,
    /// Its items, as a worker would read them now.
    pub(crate) items: Vec<Item>,
    /// The project's claims.
    pub(crate) claims: Claims,
}

/// Reads `source` (each item it leaves out said on stderr) and the
/// project's claims.
pub(crate) fn local(paths: &ProjectPaths, source: &str) -> Result<Local, CtlError> {
    let source = read_source(paths, source)?;
    let (items, left_out) = source.read_leaving_out(&paths.root)?;
    for item in &left_out {
        crate::output::say_err!("ralph-ctl: {item}");
    }
    let claims = ClaimStore::new(paths).read()?;
    Ok(Local {
        source,
        items,
        claims,
    })
}

impl Local {
    /// Each item's standing at `now`, in the source's order, with its
    /// record while that holds it (claimed, or how it ended).
    pub(crate) fn standing(&self, now: Timestamp) -> Vec<(&'static str, Option<&ItemRecord>)> {
        // A free item whose dependencies have not all landed waits on them.
        let free = |item: &Item| {
            if self.claims.missing(item).is_empty() {
                "free"
            } else {
                "waiting"
            }
        };
        self.items
            .iter()
            .map(|item| match self.claims.items.get(&item.id) {
                _ if self.claims.is_free(&item.id, now) => (free(item), None),
                Some(record) => (record.status.as_str(), Some(record)),
                None => (free(item), None),
            })
            .collect()
    }
}

/// A backlog with the records every machine sharing it keeps on a git
/// remote.
pub(crate) struct OnRemote {
    /// The source, as given.
    pub(crate) source: Source,
    /// Its items, as a worker would read them now.
    pub(crate) items: Vec<Item>,
    /// The remote's records, by item id.
    pub(crate) records: BTreeMap<String, (String, Record)>,
    /// The ids whose records were forgotten first (`--retry`).
    pub(crate) forgotten: Vec<String>,
}

/// One line of a shared backlog: an item's id, its title and its record.
pub(crate) type Row<'a> = (String, String, Option<&'a Record>);

/// Reads `source` (each item it leaves out said on stderr) and, after
/// forgetting those `retry` names, the records on the git remote `remote`.
pub(crate) fn remote(
    paths: &ProjectPaths,
    source: &str,
    remote: &str,
    retry: Option<&[String]>,
) -> Result<OnRemote, CtlError> {
    let source = read_source(paths, source)?;
    let (items, left_out) = source.read_leaving_out(&paths.root)?;
    for item in &left_out {
        crate::output::say_err!("ralph-ctl: {item}");
    }
    let book = RemoteBook::new(Remote::find(&paths.root, remote)?, &source);
    let unreachable = |source: Refused| CtlError::Remote {
        name: remote.to_string(),
        doing: RemoteDoing::Reading,
        source,
    };
    let mut forgotten = Vec::new();
    if let Some(ids) = retry {
        forgotten = book.forget(ids).map_err(unreachable)?;
    }
    let records = book.read().map_err(unreachable)?;
    Ok(OnRemote {
        source,
        items,
        records,
        forgotten,
    })
}

impl OnRemote {
    /// The source's items first, then what the remote records of items the
    /// source no longer lists (their box ticked on a landed base, say).
    pub(crate) fn rows(&self) -> Vec<Row<'_>> {
        let mut rows: Vec<Row<'_>> = self
            .items
            .iter()
            .map(|i| {
                (
                    i.id.clone(),
                    i.title.clone(),
                    self.records.get(&i.id).map(|(_, r)| r),
                )
            })
            .collect();
        for (id, (_, record)) in &self.records {
            if !self.items.iter().any(|i| &i.id == id) {
                rows.push((id.clone(), record.title.clone(), Some(record)));
            }
        }
        rows
    }

    /// What item `id` of the source waits on: its dependencies with no
    /// done record on the remote.
    pub(crate) fn missing(&self, id: &str) -> Vec<&str> {
        self.items
            .iter()
            .find(|i| i.id == id)
            .map(|i| {
                i.after
                    .iter()
                    .filter(|d| {
                        self.records
                            .get(d.as_str())
                            .is_none_or(|(_, r)| r.status != ItemStatus::Done)
                    })
                    .map(String::as_str)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where `row` stands at `now`.
    pub(crate) fn standing(&self, row: &Row<'_>, now: Timestamp) -> &'static str {
        let (id, _, record) = row;
        match record {
            Some(r) if !r.is_free(now) => r.status.as_str(),
            _ if self.missing(id).is_empty() => "free",
            _ => "waiting",
        }
    }
}

/// `source` parsed, its repository pinned (a `github:` source's).
fn read_source(paths: &ProjectPaths, source: &str) -> Result<Source, CtlError> {
    let mut parsed: Source = source.parse()?;
    parsed.pin_repository(&paths.root)?;
    Ok(parsed)
}
