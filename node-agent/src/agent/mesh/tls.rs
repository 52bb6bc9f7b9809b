//! The mesh's mutual TLS. Every node of a job derives the same Ed25519 key
//! from the job's secret, and from it the same self-signed certificate (fixed
//! serial, dates and names, and Ed25519 signs deterministically). A peer is
//! accepted only if it presents exactly that certificate and proves, in the
//! TLS 1.3 handshake, that it holds its key: both sides prove knowledge of
//! the job's secret before anything else crosses the connection, nothing
//! reusable ever does (the key never leaves the node), and a recorded
//! exchange cannot be replayed (each handshake uses fresh ephemeral keys).
//! Another job's agent, a user's server squatting a port, or anything else
//! fails the handshake.
use std::sync::Arc;

use hmac::{Hmac, Mac};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::{CertifiedKey, SigningKey, SingleCertAndKey};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, Error, ServerConfig, SignatureScheme,
};
use sha2::Sha256;

/// The name a client asks for (the pinned certificate is what counts).
pub const SERVER_NAME: &str = "syndeo-mesh";

/// This job's mesh identity on this node: its certificate and the TLS
/// configurations of both ends.
pub struct MeshTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
    /// The job's certificate (the same on every node of the job); the
    /// configurations hold it, and only the tests read it here.
    #[cfg_attr(not(test), allow(dead_code))]
    pub cert: CertificateDer<'static>,
}

impl MeshTls {
    /// Derives the job's key and certificate from its secret. The key is
    /// parsed once (one Ed25519 public-key computation): that one signing
    /// key signs the certificate and serves both ends of TLS.
    pub fn from_job_secret(job_secret: &str) -> Result<MeshTls, String> {
        let pkcs8 = PrivatePkcs8KeyDer::from(ed25519_pkcs8(&derive_seed(job_secret)));
        let key = rustls::crypto::ring::sign::any_eddsa_type(&pkcs8).map_err(|e| format!("the mesh key: {e}"))?;
        let cert = certificate(&key)?;
        let identity = Arc::new(SingleCertAndKey::from(CertifiedKey::new(vec![cert.clone()], key)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(Pinned { cert: cert.clone(), algs: provider.signature_verification_algorithms });
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier.clone())
            .with_cert_resolver(identity.clone());
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_cert_resolver(identity);
        Ok(MeshTls { server: Arc::new(server), client: Arc::new(client), cert })
    }

    pub fn server_name() -> ServerName<'static> {
        ServerName::try_from(SERVER_NAME).expect("a valid DNS name")
    }
}

/// The Ed25519 seed: HMAC-SHA256(job secret, a label of its own), so the
/// key shares nothing usable with the job's other secrets.
fn derive_seed(job_secret: &str) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(job_secret.as_bytes()).expect("HMAC takes any key length");
    m.update(b"syndeo mesh tls ed25519 key v1");
    m.finalize().into_bytes().into()
}

/// PKCS#8 v1 of an Ed25519 private key (RFC 8410): a fixed prefix, then the seed.
fn ed25519_pkcs8(seed: &[u8; 32]) -> Vec<u8> {
    const PREFIX: [u8; 16] =
        [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    let mut der = PREFIX.to_vec();
    der.extend_from_slice(seed);
    der
}

/// The job's self-signed certificate, byte for byte the same on every node,
/// signed with the job's key.
fn certificate(key: &Arc<dyn SigningKey>) -> Result<CertificateDer<'static>, String> {
    let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()]).map_err(|e| e.to_string())?;
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(9999, 12, 31);
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, "syndeo job mesh");
    let key_pair =
        rcgen::KeyPair::from_remote(Box::new(JobKey::new(key.clone())?)).map_err(|e| format!("the mesh key: {e}"))?;
    let cert = params.self_signed(&key_pair).map_err(|e| format!("the mesh certificate: {e}"))?;
    Ok(cert.der().clone())
}

/// The job's key as rcgen signs with it: the key rustls parsed, so that it
/// is not parsed (its public key computed) again.
struct JobKey {
    key: Arc<dyn SigningKey>,
    /// The raw 32-byte Ed25519 public key.
    public: Vec<u8>,
}

impl JobKey {
    fn new(key: Arc<dyn SigningKey>) -> Result<JobKey, String> {
        let spki = key.public_key().ok_or("the mesh key has no public key")?;
        // An Ed25519 SubjectPublicKeyInfo ends with the 32-byte key.
        let public = spki.as_ref().get(spki.as_ref().len().saturating_sub(32)..).unwrap_or_default().to_vec();
        Ok(JobKey { key, public })
    }
}

impl rcgen::RemoteKeyPair for JobKey {
    fn public_key(&self) -> &[u8] {
        &self.public
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let signer = self.key.choose_scheme(&[SignatureScheme::ED25519]).ok_or(rcgen::Error::RemoteKeyError)?;
        signer.sign(msg).map_err(|_| rcgen::Error::RemoteKeyError)
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ED25519
    }
}

/// Accepts exactly the job's certificate, and checks the peer's handshake
/// signature with it (TLS 1.3 only).
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    algs: WebPkiSupportedAlgorithms,
}

impl Pinned {
    fn check(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> Result<(), Error> {
        if intermediates.is_empty() && end_entity.as_ref() == self.cert.as_ref() {
            Ok(())
        } else {
            Err(Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
        }
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.check(end_entity, intermediates).map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::General("the mesh speaks TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(msg, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.check(end_entity, intermediates).map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::General("the mesh speaks TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(msg, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_of_a_job_derives_the_same_certificate_and_other_jobs_another() {
        let a1 = MeshTls::from_job_secret("job-a-secret").unwrap();
        let a2 = MeshTls::from_job_secret("job-a-secret").unwrap();
        let b = MeshTls::from_job_secret("job-b-secret").unwrap();
        assert_eq!(a1.cert, a2.cert);
        assert_ne!(a1.cert, b.cert);
    }

    /// The certificate is the one rcgen makes from the key it parses itself
    /// (how it was derived before): agents of either version agree.
    #[test]
    fn the_certificate_is_the_same_as_rcgens_own_from_the_pkcs8_key() {
        let pkcs8 = ed25519_pkcs8(&derive_seed("job-a-secret"));
        let own = rcgen::KeyPair::try_from(pkcs8.as_slice()).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()]).unwrap();
        params.serial_number = Some(rcgen::SerialNumber::from(1u64));
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(9999, 12, 31);
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, "syndeo job mesh");
        let before = params.self_signed(&own).unwrap().der().clone();
        assert_eq!(MeshTls::from_job_secret("job-a-secret").unwrap().cert, before);
    }
}
