//! The replies of one batch of commands on one connection ([`Sink`]): the commands
//! (`cmd/`) append to it, the connection loop (`server.rs`) writes it out in one
//! write, waiting first for replies that stand behind a replication wait.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::poller::Poller;
use crate::protocol::{Encoder, Version};

/// A reply buffer larger than this after a write is given back.
const RETAINED_REPLY_BUFFER_BYTES: usize = 256 * 1024;

/// A reply that is written once the write behind it is durable.
pub type LaterReply = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

enum Queued {
    Bytes(Vec<u8>),
    Later(LaterReply),
}

/// The replies of one batch of commands, in order. While no reply is waiting for
/// replication they go straight into `out`; after one is, later replies queue
/// behind it so the order on the wire is the order of the commands. Each queued
/// [`Queued::Later`] counts as one durability wait of the loop's [`Poller`]
/// until it is awaited or dropped.
pub struct Sink {
    out: Vec<u8>,
    queue: VecDeque<Queued>,
    /// Bytes of the [`Queued::Bytes`] in `queue`.
    queued_bytes: usize,
    poller: Arc<Poller>,
}

impl Sink {
    pub(crate) fn new(poller: Arc<Poller>) -> Self {
        Self {
            out: Vec::with_capacity(16 * 1024),
            queue: VecDeque::new(),
            queued_bytes: 0,
            poller,
        }
    }

    /// An empty sink on the same event loop, for replies that are collected
    /// rather than sent (a command inside EXEC answers into one).
    pub(crate) fn detached(&self) -> Sink {
        Sink::new(self.poller.clone())
    }

    /// The replies appended so far if all are known now, taken out of the sink;
    /// replies waiting for replication stay (and count as bytes not taken).
    pub(crate) fn take_ready(&mut self) -> Vec<u8> {
        if self.queue.is_empty() {
            std::mem::take(&mut self.out)
        } else {
            Vec::new()
        }
    }

    /// Appends a reply that is known now.
    pub fn reply(&mut self, version: Version, f: impl FnOnce(&mut Encoder<'_>)) {
        if self.queue.is_empty() {
            f(&mut Encoder::new(&mut self.out, version));
        } else {
            let mut bytes = Vec::new();
            f(&mut Encoder::new(&mut bytes, version));
            self.queued_bytes += bytes.len();
            self.queue.push_back(Queued::Bytes(bytes));
        }
    }

    /// Appends a reply that is known once `later` completes.
    pub fn later(&mut self, later: LaterReply) {
        self.poller.durability_wait_started();
        self.queue.push_back(Queued::Later(later));
    }

    /// Reply bytes not yet written, queued behind a replication wait or not: a
    /// pipeline of large GETs behind one SET counts too.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.out.len() + self.queued_bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.out.is_empty() && self.queue.is_empty()
    }

    /// Waits for every queued reply and writes everything out.
    pub(crate) async fn flush(&mut self, stream: &mut TcpStream) -> std::io::Result<()> {
        while let Some(q) = self.queue.pop_front() {
            match q {
                Queued::Bytes(b) => {
                    self.queued_bytes -= b.len();
                    self.out.extend_from_slice(&b);
                }
                Queued::Later(f) => {
                    // Ends the wait even if this future is dropped mid-await.
                    let wait = DurabilityWait(&self.poller);
                    let b = f.await;
                    drop(wait);
                    self.out.extend_from_slice(&b);
                }
            }
        }
        if !self.out.is_empty() {
            stream.write_all(&self.out).await?;
            self.out.clear();
            if self.out.capacity() > RETAINED_REPLY_BUFFER_BYTES {
                self.out = Vec::with_capacity(16 * 1024);
            }
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        for q in &self.queue {
            if matches!(q, Queued::Later(_)) {
                self.poller.durability_wait_done();
            }
        }
    }
}

/// One reply's wait for replication being awaited; ends it when dropped.
struct DurabilityWait<'a>(&'a Poller);

impl Drop for DurabilityWait<'_> {
    fn drop(&mut self) {
        self.0.durability_wait_done();
    }
}
