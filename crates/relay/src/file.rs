//! Serving a file as a snapshot (`fastrepl relay --file PATH`): no master, one generation holding the
//! file's bytes, read once into the region and then served like any RDB. This makes the data path
//! measurable on its own (`fastrepl fetch`, the remote-read benchmark, after the Alluxio-over-RDMA experiments).

use crate::error::Error;
use crate::shared::Shared;
use replication::ReplId;
use snapshot::Generation;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// Load `path` into a new generation and publish it; the generation stays complete for good.
pub(crate) fn load(shared: &Arc<Shared>, path: &Path) -> Result<(), Error> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::Config(format!("open {}: {e}", path.display())))?;
    let len = f.metadata().map_err(|e| Error::Config(format!("stat {}: {e}", path.display())))?.len();
    // A file has no replication ID; all zeros says so to anyone who looks.
    let replid = ReplId([b'0'; 40]);
    let (gen, mut writer): (Arc<Generation>, _) =
        Generation::create(1, replid, 0, Some(len), shared.config.snapshot, shared.store.as_ref()).map_err(|e| Error::Config(format!("region for {}: {e}", path.display())))?;
    shared.publish(gen.clone());
    crate::events::rdb_started(gen.id());
    let t0 = std::time::Instant::now();
    // The generation fails with the load: agents waiting on it are told.
    let fail = |why: String| {
        shared.rdb_failed(gen.id(), why.clone());
        Error::Config(format!("load {}: {why}", path.display()))
    };
    let mut done = 0u64;
    while done < len {
        let spare = writer.spare((len - done).min(limits::RDB_READ_BYTES_MAX));
        let n = f.read(spare).map_err(|e| Error::Config(format!("read {}: {e}", path.display())))?;
        if n == 0 {
            return Err(fail("the file shrank while being read".into()));
        }
        writer.commit(n).map_err(|e| fail(e.to_string()))?;
        done += n as u64;
    }
    writer.finish(len).map_err(|e| fail(e.to_string()))?;
    shared.rdb_complete(gen.id());
    crate::events::published(gen.id(), len);
    tracing::info!(file = %path.display(), bytes = len, secs = t0.elapsed().as_secs_f64(), "file loaded; serving it as generation 1");
    Ok(())
}
