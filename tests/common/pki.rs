//! A throwaway certificate authority for tests that need TLS: rcgen certificates made in the
//! test, never written outside its temporary directory.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A self-signed CA that signs leaf certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new self-signed CA named `cn`.
    pub fn new(cn: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        Self { issuer }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf (certificate, key), both PEM, for `cn` (and organisation `org`) with `sans`,
    /// for `usage`.
    pub fn leaf(
        &self,
        cn: &str,
        org: Option<&str>,
        sans: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut p = CertificateParams::new(sans).expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("leaf key");
        let cert = p.signed_by(&key, &self.issuer).expect("signing leaf");
        (cert.pem(), key.serialize_pem())
    }
}
