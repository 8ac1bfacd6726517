//! Reference reader of the loader benchmark: reads `data_by_uuid` rows for the UUIDs in a file (16 bytes each,
//! in file order) with the plain scylla driver, C requests in flight without pause, consistency ONE, and copies
//! each sample as it arrives into a batch buffer of B samples (what a loader must hand over); then prints
//! `{"rows", "batches", "seconds", "rows_per_s", "mb_per_s"}` as one JSON line.

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, stream};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Consistency;
use uuid::Uuid;

const USAGE: &str = "usage: refreader --keyspace KS --uuids FILE \
    [--hosts 127.0.0.1[,HOST...]] [--port 9042] [--concurrency 64] [--batch 128]";

struct Args {
    hosts: Vec<String>,
    port: u16,
    keyspace: String,
    uuids: String,
    concurrency: usize,
    batch: usize,
}

struct Report {
    rows: u64,
    batches: u64,
    seconds: f64,
    payload_bytes: u64,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("refreader: {problem}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("refreader: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(report) => {
            let seconds = report.seconds;
            println!(
                "{{\"rows\": {}, \"batches\": {}, \"seconds\": {seconds:.3}, \"rows_per_s\": {:.1}, \"mb_per_s\": {:.2}}}",
                report.rows,
                report.batches,
                report.rows as f64 / seconds,
                // MB = 10^6 bytes of sample payload (the data blobs).
                report.payload_bytes as f64 / 1e6 / seconds,
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("refreader: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<Report, Box<dyn Error>> {
    let raw = std::fs::read(&args.uuids)?;
    if raw.len() % 16 != 0 {
        return Err(format!("{}: not a whole number of 16-byte UUIDs", args.uuids).into());
    }
    let uuids: Vec<Uuid> = raw
        .chunks_exact(16)
        .map(|bytes| Uuid::from_slice(bytes).expect("16 bytes"))
        .collect();
    let profile = ExecutionProfile::builder()
        .consistency(Consistency::One)
        .build();
    let session = SessionBuilder::new()
        .known_nodes(
            args.hosts
                .iter()
                .map(|host| format!("{host}:{}", args.port)),
        )
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await?;
    let select = session
        .prepare(format!(
            "SELECT label, data FROM {}.data_by_uuid WHERE uuid = ?",
            args.keyspace
        ))
        .await?;
    let (session, select) = (&session, &select);

    let started = Instant::now();
    let mut reads = stream::iter(uuids)
        .map(|uuid| async move {
            let rows = session
                .execute_unpaged(select, (uuid,))
                .await?
                .into_rows_result()?;
            let (_label, data) = rows.single_row::<(Option<i32>, Bytes)>()?;
            Ok::<Bytes, Box<dyn Error>>(data)
        })
        .buffer_unordered(args.concurrency);
    let (mut rows, mut bytes, mut batches) = (0u64, 0u64, 0u64);
    let mut batch: Vec<u8> = Vec::new();
    let mut in_batch = 0;
    while let Some(read) = reads.next().await {
        let data = read?;
        if in_batch == 0 {
            batch = Vec::with_capacity(data.len() * args.batch);
        }
        batch.extend_from_slice(&data);
        in_batch += 1;
        rows += 1;
        bytes += data.len() as u64;
        if in_batch == args.batch {
            std::hint::black_box(std::mem::take(&mut batch));
            in_batch = 0;
            batches += 1;
        }
    }
    batches += u64::from(in_batch > 0);
    Ok(Report {
        rows,
        batches,
        seconds: started.elapsed().as_secs_f64(),
        payload_bytes: bytes,
    })
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        hosts: vec!["127.0.0.1".to_owned()],
        port: 9042,
        keyspace: String::new(),
        uuids: String::new(),
        concurrency: 64,
        batch: 128,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let invalid = |_| format!("invalid value for {flag}: {value:?}");
        match flag.as_str() {
            "--hosts" => args.hosts = value.split(',').map(str::to_owned).collect(),
            "--port" => args.port = value.parse().map_err(invalid)?,
            "--keyspace" => args.keyspace = value,
            "--uuids" => args.uuids = value,
            "--concurrency" => args.concurrency = value.parse().map_err(invalid)?,
            "--batch" => args.batch = value.parse().map_err(invalid)?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if args.keyspace.is_empty() || args.uuids.is_empty() {
        return Err("--keyspace and --uuids are required".to_owned());
    }
    if args.concurrency == 0 || args.batch == 0 {
        return Err("--concurrency and --batch must be positive".to_owned());
    }
    Ok(args)
}
