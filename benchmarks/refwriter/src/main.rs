//! Reference writer of the ingest benchmark: writes N samples (a `data_by_uuid` row and a
//! `metadata_by_nat` row each) with the plain scylla driver, C requests in flight, consistency ONE,
//! then prints `{"rows", "seconds", "rows_per_s", "mb_per_s"}` as one JSON line.

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt, future, stream};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Consistency;
use uuid::Uuid;

const USAGE: &str = "usage: refwriter --keyspace KS --rows N --bytes B \
    [--hosts 127.0.0.1[,HOST...]] [--port 9042] [--concurrency 64] [--labels 10]";

/// Payloads are drawn from this many pre-generated buffers: generating data costs nothing during the run.
const PAYLOADS: usize = 64;

struct Args {
    hosts: Vec<String>,
    port: u16,
    keyspace: String,
    rows: u64,
    bytes: usize,
    concurrency: usize,
    labels: u64,
}

struct Report {
    rows: u64,
    seconds: f64,
    payload_bytes: u64,
}

enum Insert<'a> {
    Data {
        uuid: Uuid,
        label: i32,
        data: &'a [u8],
    },
    Metadata {
        sample: i64,
        label: i32,
        uuid: Uuid,
    },
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("refwriter: {problem}\n{USAGE}");
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
            eprintln!("refwriter: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(report) => {
            let seconds = report.seconds;
            println!(
                "{{\"rows\": {}, \"seconds\": {seconds:.3}, \"rows_per_s\": {:.1}, \"mb_per_s\": {:.2}}}",
                report.rows,
                report.rows as f64 / seconds,
                // MB = 10^6 bytes of sample payload (the data blobs).
                report.payload_bytes as f64 / 1e6 / seconds,
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("refwriter: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<Report, Box<dyn Error>> {
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
    let keyspace = &args.keyspace;
    let insert_data = session
        .prepare(format!(
            "INSERT INTO {keyspace}.data_by_uuid (uuid, label, data) VALUES (?, ?, ?)"
        ))
        .await?;
    let insert_metadata = session
        .prepare(format!(
            "INSERT INTO {keyspace}.metadata_by_nat (sample, label, uuid, sample_bytes) VALUES (?, ?, ?, ?)"
        ))
        .await?;
    let payloads: Vec<Vec<u8>> = (0..PAYLOADS)
        .map(|_| {
            let mut payload = vec![0; args.bytes];
            fastrand::fill(&mut payload);
            payload
        })
        .collect();
    let sample_bytes = i32::try_from(args.bytes)?;

    let inserts = (0..args.rows).flat_map(|sample| {
        let uuid = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid();
        let data = &payloads[(sample % PAYLOADS as u64) as usize];
        let label = i32::try_from(sample % args.labels).expect("--labels is checked to fit an int");
        let sample = i64::try_from(sample).expect("a row count fits a bigint");
        [
            Insert::Data { uuid, label, data },
            Insert::Metadata {
                sample,
                label,
                uuid,
            },
        ]
    });
    let (session, insert_data, insert_metadata) = (&session, &insert_data, &insert_metadata);
    let started = Instant::now();
    stream::iter(inserts)
        .map(|insert| async move {
            match insert {
                Insert::Data { uuid, label, data } => {
                    session
                        .execute_unpaged(insert_data, (uuid, label, data))
                        .await
                }
                Insert::Metadata {
                    sample,
                    label,
                    uuid,
                } => {
                    session
                        .execute_unpaged(insert_metadata, (sample, label, uuid, sample_bytes))
                        .await
                }
            }
        })
        .buffer_unordered(args.concurrency)
        .try_for_each(|_| future::ready(Ok(())))
        .await?;
    Ok(Report {
        rows: args.rows,
        seconds: started.elapsed().as_secs_f64(),
        payload_bytes: args.rows * args.bytes as u64,
    })
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        hosts: vec!["127.0.0.1".to_owned()],
        port: 9042,
        keyspace: String::new(),
        rows: 0,
        bytes: 0,
        concurrency: 64,
        labels: 10,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let invalid = |_| format!("invalid value for {flag}: {value:?}");
        match flag.as_str() {
            "--hosts" => args.hosts = value.split(',').map(str::to_owned).collect(),
            "--port" => args.port = value.parse().map_err(invalid)?,
            "--keyspace" => args.keyspace = value,
            "--rows" => args.rows = value.parse().map_err(invalid)?,
            "--bytes" => args.bytes = value.parse().map_err(invalid)?,
            "--concurrency" => args.concurrency = value.parse().map_err(invalid)?,
            "--labels" => args.labels = value.parse().map_err(invalid)?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if args.keyspace.is_empty() || args.rows == 0 || args.bytes == 0 {
        return Err("--keyspace, --rows and --bytes are required".to_owned());
    }
    if args.concurrency == 0 || args.labels == 0 || args.labels > i32::MAX as u64 {
        return Err("--concurrency must be positive, --labels between 1 and 2^31-1".to_owned());
    }
    Ok(args)
}
