//! A reconnecting connection flood against a running gangscaler, on the loopback range only,
//! and what a fresh client sees meanwhile: the figure of `docs/operations.md#connection-limits`.
//!
//! `CONNS` silent TCP connections from `FLOOD_IP` (default 127.0.0.2) to the gRPC port and as
//! many to the metrics port, each reopened as soon as the server closes it, for `SECONDS`;
//! meanwhile, every 2 s, a fresh client on 127.0.0.1 opens its own connection and calls
//! `NodeGroups` (2 s timeout) and scrapes `/metrics`. Prints how many were served, then stops.
//!
//! Run: `cargo run --release --example conn_flood -- 127.0.0.1:8086 127.0.0.1:9464 300 30`.

#![expect(
    clippy::expect_used,
    reason = "a measurement tool: bad arguments abort it"
)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use gangscaler::proto;
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Most flood connections per port, whatever the arguments say.
const MAX_CONNS: usize = 2000;
/// Longest flood, whatever the arguments say.
const MAX_SECONDS: u64 = 600;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: &str) -> T {
    args.get(i)
        .map_or(default, String::as_str)
        .parse()
        .ok()
        .expect("arguments: GRPC_ADDR METRICS_ADDR [CONNS] [SECONDS] [FLOOD_IP]")
}

fn loopback(addr: SocketAddr) -> SocketAddr {
    assert!(addr.ip().is_loopback(), "{addr}: loopback addresses only");
    addr
}

async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

fn flood(from: IpAddr, to: SocketAddr, conns: usize, stop: &CancellationToken) {
    for _ in 0..conns {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 256];
            while !stop.is_cancelled() {
                let Ok(mut s) = connect_from(from, to).await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
                    }
                }
            }
        });
    }
}

async fn grpc_call(grpc: SocketAddr) -> bool {
    let call = async {
        let channel = Channel::from_shared(format!("http://{grpc}"))
            .ok()?
            .connect()
            .await
            .ok()?;
        CloudProviderClient::new(channel)
            .node_groups(proto::NodeGroupsRequest {})
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), call).await,
        Ok(Some(_))
    )
}

async fn scrape(metrics: SocketAddr) -> bool {
    let get = async {
        let mut s = TcpStream::connect(metrics).await.ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        out.starts_with(b"HTTP/1.1 200").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), get).await,
        Ok(Some(()))
    )
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let grpc = loopback(arg(&args, 1, ""));
    let metrics = loopback(arg(&args, 2, ""));
    let conns = arg::<usize>(&args, 3, "300").min(MAX_CONNS);
    let seconds = arg::<u64>(&args, 4, "30").min(MAX_SECONDS);
    let from: IpAddr = arg(&args, 5, "127.0.0.2");
    assert!(from.is_loopback(), "{from}: loopback addresses only");
    let stop = CancellationToken::new();
    flood(from, grpc, conns, &stop);
    flood(from, metrics, conns, &stop);
    // Let the flood take what it can before the first probe.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut calls, mut served, mut scrapes, mut scraped) = (0, 0, 0, 0);
    let end = gangscaler::clock::mono_std() + Duration::from_secs(seconds);
    while gangscaler::clock::mono_std() < end {
        let started = gangscaler::clock::mono_std();
        calls += 1;
        served += usize::from(grpc_call(grpc).await);
        scrapes += 1;
        scraped += usize::from(scrape(metrics).await);
        tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
    }
    stop.cancel();
    println!(
        "flood: {conns} reconnecting silent connections from {from} to each port for {seconds} s"
    );
    println!("fresh gRPC client on 127.0.0.1: {served} of {calls} NodeGroups calls served");
    println!("metrics scrapes from 127.0.0.1: {scraped} of {scrapes} served");
}
