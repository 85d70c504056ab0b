//! Certificates for one test cluster: a CA, the API server's serving certificate, an admin
//! client certificate (`O=system:masters`) and the service-account signing key.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// PEM material of one cluster.
pub struct ClusterPki {
    pub ca_cert: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    pub service_account_key: String,
    pub service_account_public_key: String,
}

fn pki_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |source| Error::Pki { what, source }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

impl ClusterPki {
    pub fn generate(cluster: &str) -> Result<Self, Error> {
        let ca_key = KeyPair::generate().map_err(pki_err("CA key"))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err("CA"))?;
        ca_params.distinguished_name = name(&format!("hubfed-testenv-{cluster}-ca"), None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(pki_err("CA"))?;
        let issuer = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate().map_err(pki_err("serving key"))?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])
        .map_err(pki_err("serving certificate"))?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        serving.distinguished_name = name("kube-apiserver", None);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving
            .signed_by(&serving_key, &issuer)
            .map_err(pki_err("serving certificate"))?;

        let admin_key = KeyPair::generate().map_err(pki_err("admin key"))?;
        let mut admin =
            CertificateParams::new(Vec::<String>::new()).map_err(pki_err("admin certificate"))?;
        admin.distinguished_name = name("admin", Some("system:masters"));
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin
            .signed_by(&admin_key, &issuer)
            .map_err(pki_err("admin certificate"))?;

        let sa_key = KeyPair::generate().map_err(pki_err("service-account key"))?;

        Ok(Self {
            ca_cert: ca_cert.pem(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            service_account_key: sa_key.serialize_pem(),
            service_account_public_key: sa_key.public_key_pem(),
        })
    }
}
