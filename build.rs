//! Generates the externalgrpc server and client from `proto/externalgrpc.proto` with the
//! vendored protoc, so no system protoc is needed.

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
            &[std::path::PathBuf::from("proto/externalgrpc.proto")],
            &[std::path::PathBuf::from("proto"), include],
        )?;
    Ok(())
}
