//! `cargo run -- write` regenerates the checked-in etcd client code;
//! `cargo run -- check` fails, naming the file, when the checked-in code is
//! not what the .proto files generate (CI runs it with protoc installed).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The .proto files, relative to [`PROTO_DIR`]: one generated file each,
/// named after its package.
const PROTOS: [&str; 2] = ["etcdserverpb.proto", "v3lockpb.proto"];

/// Where the schema and the generated code live, relative to the repository.
const PROTO_DIR: &str = "src/election/etcd/proto";

/// The generated files, one per package, in `PROTO_DIR/generated`.
const GENERATED: [&str; 2] = ["etcdserverpb.rs", "v3lockpb.rs"];

fn generate(proto_dir: &Path, out_dir: &Path) -> Result<(), String> {
    let protos: Vec<PathBuf> = PROTOS.iter().map(|name| proto_dir.join(name)).collect();
    tonic_prost_build::configure()
        // A client of etcd: no server code, which would need tonic's server
        // (and its router) in the library.
        .build_server(false)
        // No `connect` helpers: the library builds its own balanced channel.
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out_dir)
        .compile_protos(&protos, &[proto_dir.to_path_buf()])
        .map_err(|error| format!("cannot generate the etcd client code: {error}"))
}

fn run(mode: &str) -> Result<(), String> {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let proto_dir = repository.join(PROTO_DIR);
    let checked_in = proto_dir.join("generated");
    match mode {
        "write" => {
            std::fs::create_dir_all(&checked_in)
                .map_err(|error| format!("cannot create {}: {error}", checked_in.display()))?;
            generate(&proto_dir, &checked_in)
        }
        "check" => {
            let fresh = std::env::temp_dir().join(format!("etcd-proto-{}", std::process::id()));
            std::fs::create_dir_all(&fresh)
                .map_err(|error| format!("cannot create {}: {error}", fresh.display()))?;
            let result = generate(&proto_dir, &fresh).and_then(|()| compare(&fresh, &checked_in));
            let _ = std::fs::remove_dir_all(&fresh);
            result
        }
        other => Err(format!("unknown mode {other:?}: use `write` or `check`")),
    }
}

fn compare(fresh: &Path, checked_in: &Path) -> Result<(), String> {
    for name in GENERATED {
        let read = |dir: &Path| {
            std::fs::read(dir.join(name))
                .map_err(|error| format!("cannot read {}: {error}", dir.join(name).display()))
        };
        if read(fresh)? != read(checked_in)? {
            return Err(format!(
                "{PROTO_DIR}/generated/{name} is not what {PROTO_DIR}/*.proto generate: \
                 run `cargo run --manifest-path tools/etcd-proto/Cargo.toml -- write` and commit the result"
            ));
        }
    }
    let listed = std::fs::read_dir(fresh)
        .map_err(|error| format!("cannot list {}: {error}", fresh.display()))?
        .count();
    if listed != GENERATED.len() {
        return Err(format!(
            "the .proto files generate {listed} files, not the {} this tool checks: update GENERATED",
            GENERATED.len()
        ));
    }
    println!("the checked-in etcd client code is what {PROTO_DIR}/*.proto generate");
    Ok(())
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match run(&mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("etcd-proto: {message}");
            ExitCode::FAILURE
        }
    }
}
