//! Running a storage server: bind, serve, enlist with the coordinator, export
//! metrics, stop on request (DESIGN §2).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{ObjectStore, StoreConfig};
use ramstore_rpc::{serve, TcpTransport, Transport};
use ramstore_wire::{decode_response, encode_request, Request, Response, Services};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::metrics::render_store;
use crate::storage_service::StorageService;

/// How a storage server is started.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to accept clients on (`127.0.0.1:0` picks a free port).
    pub listen: String,
    /// Address other processes use to reach this server; default: the bound address.
    pub advertise: Option<String>,
    /// The coordinator to enlist with.
    pub coordinator: String,
    /// Bytes of log memory.
    pub memory_bytes: usize,
    /// Where to serve Prometheus metrics (`None`: nowhere).
    pub metrics_listen: Option<String>,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ramstore_master::ConfigError),
    #[error("coordinator at {addr} refused enlistment: {reason}")]
    Enlist { addr: String, reason: String },
}

/// A running storage server.
pub struct StartedServer {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub service: Arc<StorageService>,
    tasks: Vec<JoinHandle<()>>,
}

impl StartedServer {
    /// Stops serving (connections close; the store is freed when the last
    /// reference goes).
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// How long the server keeps trying to enlist before giving up.
pub const ENLIST_TIMEOUT_MS: u64 = 60_000;

/// Starts a storage server and enlists it; returns once it is serving and enlisted.
pub async fn start(options: ServerOptions) -> Result<StartedServer, ServerError> {
    let store = ObjectStore::new(StoreConfig::new(options.memory_bytes))?;
    let service = Arc::new(StorageService::new(store));
    let listener =
        TcpListener::bind(&options.listen)
            .await
            .map_err(|source| ServerError::Listen {
                addr: options.listen.clone(),
                source,
            })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServerError::Listen {
            addr: options.listen.clone(),
            source,
        })?;
    let mut tasks = vec![tokio::spawn(serve(listener, service.clone()))];
    let mut metrics_addr = None;
    if let Some(m) = &options.metrics_listen {
        let listener = TcpListener::bind(m)
            .await
            .map_err(|source| ServerError::Listen {
                addr: m.clone(),
                source,
            })?;
        metrics_addr = listener.local_addr().ok();
        tasks.push(tokio::spawn(serve_metrics(listener, service.clone())));
    }
    let advertise = options
        .advertise
        .clone()
        .unwrap_or_else(|| addr.to_string());
    let server_id = enlist(
        &options.coordinator,
        &advertise,
        options.memory_bytes as u64,
    )
    .await?;
    service.set_server_id(server_id);
    tracing::info!(server_id, %addr, coordinator = %options.coordinator, memory_bytes = options.memory_bytes, "storage server enlisted");
    Ok(StartedServer {
        addr,
        metrics_addr,
        service,
        tasks,
    })
}

/// Enlists with the coordinator, retrying while it is unreachable (it may start
/// after us).
async fn enlist(coordinator: &str, advertise: &str, memory_bytes: u64) -> Result<u64, ServerError> {
    let transport = TcpTransport::new();
    let mut frame = Vec::new();
    encode_request(
        0,
        &Request::Enlist {
            replaces_server_id: 0,
            services: Services::BOTH,
            memory_bytes,
            address: advertise,
        },
        &mut frame,
    )
    .map_err(|e| ServerError::Enlist {
        addr: coordinator.into(),
        reason: e.to_string(),
    })?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ENLIST_TIMEOUT_MS);
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        match transport
            .call(coordinator, frame.clone(), Duration::from_secs(10))
            .await
        {
            Ok(bytes) => match decode_response(&bytes) {
                Ok((_, Response::Enlist { server_id })) => return Ok(server_id),
                Ok((_, other)) => last = format!("unexpected answer {other:?}"),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(ServerError::Enlist {
        addr: coordinator.into(),
        reason: last,
    })
}

/// A minimal HTTP endpoint: every request gets the Prometheus text of this server.
async fn serve_metrics(listener: TcpListener, service: Arc<StorageService>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let service = service.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut request)).await;
            let mut body = String::new();
            service.metrics().render(&mut body);
            render_store(&service.store().stats(), &mut body);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}
