//! `fastrepl fetch`: pull a relay's snapshot (an RDB, or the file a `relay --file` serves) without a
//! Redis replica — the data path alone, for benchmarks and for taking a copy of the dataset.

use crate::config::PullConfig;
use crate::error::Error;
use crate::pull::pipeline;
use crate::pull::progress;
use crate::pull::select;
use endpoint::Endpoint;
use serde::Serialize;
use std::time::Instant;
use transport::{Credentials, TransportKind};

/// What a fetch did.
#[derive(Debug, Clone, Serialize)]
pub struct FetchReport {
    /// Transport used.
    pub transport: TransportKind,
    /// Its detail and why it was chosen.
    pub transport_detail: String,
    /// Bytes written out.
    pub bytes: u64,
    /// Blocks pulled.
    pub blocks: u64,
    /// Seconds from connecting to the last byte written.
    pub secs: f64,
    /// Seconds from the first byte to the last.
    pub transfer_secs: f64,
    /// MiB/s over `transfer_secs`.
    pub mib_s: f64,
    /// CPU seconds of this process (user + system) during the fetch.
    pub cpu_secs: f64,
    /// Most reads in flight at once.
    pub reads_in_flight_max: u64,
}

/// Pull the relay's current generation and pass its bytes in order to `sink`.
pub fn fetch(relay: &Endpoint, token: &Credentials, settings: &PullConfig, cancel: &std::sync::atomic::AtomicBool, sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<FetchReport, Error> {
    let t0 = Instant::now();
    let cpu0 = crate::procstat::own_cpu_secs();
    let attached = progress::attach(relay, token, limits::GENERATION_WAIT_MAX)?;
    let (transport, why) = select::select(settings.transport, relay, token, &attached.offered)?;
    tracing::info!(transport = %transport.kind(), reason = %why, "transport selected");
    let pull = pipeline::Pull {
        transport: transport.as_ref(),
        progress: &attached.progress,
        readers: crate::pull::pipeline::readers(settings.readers, transport.as_ref()),
        window: crate::pull::pipeline::window(settings.window_blocks, crate::pull::pipeline::Membership::Alone),
        cancel,
        peering: None,
        counters: None,
    };
    let stats = pipeline::pull(&pull, sink)?;
    let end = Instant::now();
    let transfer = stats.first_byte.map(|f| end.duration_since(f).as_secs_f64()).unwrap_or(0.0).max(1e-9);
    Ok(FetchReport {
        transport: transport.kind(),
        transport_detail: transport.detail().map(|d| format!("{d}; {why}")).unwrap_or(why),
        bytes: stats.bytes,
        blocks: stats.blocks,
        secs: end.duration_since(t0).as_secs_f64(),
        transfer_secs: transfer,
        mib_s: stats.bytes as f64 / (1 << 20) as f64 / transfer,
        cpu_secs: crate::procstat::own_cpu_secs() - cpu0,
        reads_in_flight_max: stats.reads_in_flight_max,
    })
}
