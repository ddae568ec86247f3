//! A first program against a running cluster: create a table, write, read,
//! compare-and-swap, count, batch, scan and delete.
//!
//! Start a cluster with `ramstore dev`, then run:
//! `cargo run -p ramstore-client --example quickstart`
//! (set `RAMSTORE_COORDINATOR` if the coordinator is not at 127.0.0.1:7000).
//!
//! `crates/cli/tests/quickstart.rs` runs [`run`] against `ramstore dev`, as the
//! README suggests, so this example stays true to the client library.

use ramstore_client::{Client, ClientError, ClientOptions, MultiWriteOp, RejectRules};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ClientError> {
    let coordinator =
        std::env::var("RAMSTORE_COORDINATOR").unwrap_or_else(|_| "127.0.0.1:7000".to_string());
    for line in run(coordinator).await? {
        println!("{line}");
    }
    Ok(())
}

/// The whole tour against the coordinator at `coordinator`; returns what it
/// found, one line each.
pub async fn run(coordinator: String) -> Result<Vec<String>, ClientError> {
    let mut found = Vec::new();
    let client = Client::connect(ClientOptions::new(coordinator)).await?;

    // Tables are spread over masters by key hash; a span of 2 uses two masters.
    let table = client.create_table("quickstart", 2).await?;

    let v1 = client.write(table, b"greeting", b"hello").await?;
    let (value, version) = client.read(table, b"greeting").await?;
    found.push(format!(
        "greeting = {} (version {version})",
        String::from_utf8_lossy(&value)
    ));

    // Compare-and-swap: the write happens only if nobody changed the object since v1.
    let v2 = client
        .write_with_rules(
            table,
            b"greeting",
            b"hello, world",
            &RejectRules::version_must_equal(v1),
        )
        .await?;
    match client
        .write_with_rules(
            table,
            b"greeting",
            b"stale",
            &RejectRules::version_must_equal(v1),
        )
        .await
    {
        Err(ClientError::WrongVersion { current }) => found.push(format!(
            "stale update refused (version is {current}, we wrote {v2})"
        )),
        other => found.push(format!("unexpected: {other:?}")),
    }

    let (visits, _) = client.increment_i64(table, b"visits", 1).await?;
    found.push(format!("visits = {visits}"));

    // A batch: split by master and sent in parallel.
    let keys: Vec<String> = (0..10).map(|i| format!("user:{i}")).collect();
    let ops: Vec<MultiWriteOp<'_>> = keys
        .iter()
        .map(|k| MultiWriteOp::new(table, k.as_bytes(), b"profile"))
        .collect();
    let written = client.multi_write(&ops).await;
    found.push(format!(
        "batch wrote {} objects",
        written.iter().filter(|r| r.is_ok()).count()
    ));

    let mut scan = client.enumerate(table);
    let mut count = 0;
    while let Some(object) = scan.next().await {
        object?;
        count += 1;
    }
    found.push(format!("the table holds {count} objects"));

    client.remove(table, b"greeting").await?;
    match client.read(table, b"greeting").await {
        Err(ClientError::ObjectDoesntExist) => found.push("greeting deleted".to_string()),
        other => found.push(format!("unexpected: {other:?}")),
    }
    client.drop_table("quickstart").await?;
    Ok(found)
}
