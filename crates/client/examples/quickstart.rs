//! A first program against a running cluster: create a table, write, read,
//! compare-and-swap, count, batch, scan and delete.
//!
//! Start a cluster with `ramstore dev`, then run:
//! `cargo run -p ramstore-client --example quickstart`
//! (set `RAMSTORE_COORDINATOR` if the coordinator is not at 127.0.0.1:7000).

use ramstore_client::{Client, ClientError, ClientOptions, MultiWriteOp, RejectRules};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ClientError> {
    let coordinator =
        std::env::var("RAMSTORE_COORDINATOR").unwrap_or_else(|_| "127.0.0.1:7000".to_string());
    let client = Client::connect(ClientOptions::new(coordinator)).await?;

    // Tables are spread over masters by key hash; a span of 2 uses two masters.
    let table = client.create_table("quickstart", 2).await?;

    let v1 = client.write(table, b"greeting", b"hello").await?;
    let (value, version) = client.read(table, b"greeting").await?;
    println!(
        "greeting = {} (version {version})",
        String::from_utf8_lossy(&value)
    );

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
        Err(ClientError::WrongVersion { current }) => {
            println!("stale update refused (version is {current}, we wrote {v2})")
        }
        other => println!("unexpected: {other:?}"),
    }

    let (visits, _) = client.increment_i64(table, b"visits", 1).await?;
    println!("visits = {visits}");

    // A batch: split by master and sent in parallel.
    let keys: Vec<String> = (0..10).map(|i| format!("user:{i}")).collect();
    let ops: Vec<MultiWriteOp<'_>> = keys
        .iter()
        .map(|k| MultiWriteOp::new(table, k.as_bytes(), b"profile"))
        .collect();
    let written = client.multi_write(&ops).await;
    println!(
        "batch wrote {} objects",
        written.iter().filter(|r| r.is_ok()).count()
    );

    let mut scan = client.enumerate(table);
    let mut count = 0;
    while let Some(object) = scan.next().await {
        object?;
        count += 1;
    }
    println!("the table holds {count} objects");

    client.remove(table, b"greeting").await?;
    match client.read(table, b"greeting").await {
        Err(ClientError::ObjectDoesntExist) => println!("greeting deleted"),
        other => println!("unexpected: {other:?}"),
    }
    client.drop_table("quickstart").await?;
    Ok(())
}
