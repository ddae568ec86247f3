//! Administration: the tablet map as the client sees it, a server's statistics
//! and pings.

use ramstore_wire::{encode_request, Opcode, Request, Response};

use super::{Client, PingReply};
use crate::error::ClientError;
use crate::tablet_map::TabletInfo;

impl Client {
    // ----- administration -----------------------------------------------------

    /// Fetches the tablet map from the coordinator (refreshing the cache) and
    /// returns it, sorted by table id and start hash.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// for t in client.tablet_map().await? {
    ///     println!("table {} [{:#x}, {:#x}] on {}", t.table_id, t.start_hash, t.end_hash, t.address);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn tablet_map(&self) -> Result<Vec<TabletInfo>, ClientError> {
        self.refresh_now().await?;
        Ok(self.cached_tablet_map())
    }

    /// The tablet map as cached now, without asking the coordinator.
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::Client) {
    /// let tablets = client.cached_tablet_map();
    /// # }
    /// ```
    pub fn cached_tablet_map(&self) -> Vec<TabletInfo> {
        self.inner.map().to_infos()
    }

    /// The version of the cached tablet map.
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::Client) {
    /// println!("map version {}", client.tablet_map_version());
    /// # }
    /// ```
    pub fn tablet_map_version(&self) -> u64 {
        self.inner.map().version()
    }

    /// The statistics text (`key=value` lines) of the server at `addr`. Tried for
    /// at most one [`ClientOptions::rpc_deadline`]. An `addr` equal to
    /// [`ClientOptions::coordinator`] (also a comma-separated list) means whichever
    /// coordinator is active.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// println!("{}", client.server_stats("10.0.0.7:11101").await?);
    /// # Ok(()) }
    /// ```
    pub async fn server_stats(&self, addr: &str) -> Result<String, ClientError> {
        let inner = &*self.inner;
        inner
            .direct(
                inner.target(addr),
                inner.options.rpc_deadline,
                Opcode::GetServerStats,
                |out| encode_request(0, &Request::GetServerStats, out),
                |r| match r {
                    Response::GetServerStats { text } => Some(text.to_string()),
                    _ => None,
                },
            )
            .await
    }

    /// Pings the server at `addr`: its server id and the round-trip time. Tried for
    /// at most one [`ClientOptions::rpc_deadline`].
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let reply = client.ping("10.0.0.7:11101").await?;
    /// println!("server {} answered in {:?}", reply.server_id, reply.round_trip);
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self, addr: &str) -> Result<PingReply, ClientError> {
        let inner = &*self.inner;
        let nonce: u64 = inner.options.rng.next_u64();
        let start = inner.options.clock.now();
        let server_id = inner
            .direct(
                inner.target(addr),
                inner.options.rpc_deadline,
                Opcode::Ping,
                // caller_id 0: a client is not a server (R§7.11).
                |out| {
                    let ping = Request::Ping {
                        nonce,
                        caller_id: 0,
                    };
                    encode_request(0, &ping, out)
                },
                |r| match r {
                    Response::Ping {
                        nonce: echoed,
                        server_id,
                    } if echoed == nonce => Some(server_id),
                    _ => None,
                },
            )
            .await?;
        Ok(PingReply {
            server_id,
            round_trip: inner.options.clock.elapsed(start),
        })
    }
}
