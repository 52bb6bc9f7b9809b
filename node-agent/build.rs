//! Generates the mesh's gRPC code from proto/mesh.proto (needs `protoc`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/mesh.proto");
    tonic_build::configure().build_client(true).build_server(true).compile_protos(&["proto/mesh.proto"], &["proto"])?;
    Ok(())
}
