//! Generates the externalgrpc server and client from `proto/externalgrpc.proto` with the
//! vendored protoc, so no system protoc is needed. Also records what the binary is built from
//! (`gangscaler_build_info`, `--version`): the git commit of the checkout (`unknown` outside
//! one, or without git) and the compiler version, both read locally, never over the network.

use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let include = protoc_bin_vendored::include_path()?;
    println!("cargo:rerun-if-changed=proto/externalgrpc.proto");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_with_config(
            config,
            &[PathBuf::from("proto/externalgrpc.proto")],
            &[PathBuf::from("proto"), include],
        )?;
    build_info();
    Ok(())
}

/// Sets `BUILD_GIT_COMMIT` and `BUILD_RUSTC_VERSION` for `env!`.
fn build_info() {
    let commit = output("git", &["rev-parse", "HEAD"])
        .filter(|c| c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BUILD_GIT_COMMIT={commit}");
    // Re-run when HEAD moves: HEAD itself (checkouts) and the branch it points to (commits).
    // In a worktree these live under the worktree's own git directory, which git resolves.
    // A path that does not exist would make cargo re-run this script on every build.
    let watch = |path: &str| {
        if let Some(p) = output("git", &["rev-parse", "--git-path", path])
            && std::path::Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    };
    watch("HEAD");
    watch("packed-refs");
    if let Some(branch) = output("git", &["symbolic-ref", "-q", "HEAD"]) {
        watch(&branch);
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    // "rustc 1.89.0 (29483883e 2025-08-04)" -> "1.89.0"
    let version = output(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BUILD_RUSTC_VERSION={version}");
}

/// The trimmed stdout of a command that succeeded.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}
