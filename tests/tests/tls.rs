//! TLS and mutual TLS on berthd's port, with certificates made at test time:
//! a CA, a server certificate for localhost and 127.0.0.1, a client
//! certificate, and a second CA nobody trusts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use berth_client::{Client, ConnectOptions};
use berth_e2e::{Berthd, message};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA able to sign leaf certificates.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Result<Ca> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    })
}

/// A leaf certificate and its key, PEM.
struct Leaf {
    cert: String,
    key: String,
}

fn leaf(ca: &Ca, name: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> Result<Leaf> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, &ca.issuer)?;
    Ok(Leaf {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Every certificate the tests use, written to a fresh directory.
struct Pki {
    dir: PathBuf,
    ca: String,
    client: Leaf,
    other_ca: String,
    other_client: Leaf,
}

impl Pki {
    fn new(tag: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("berth-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let root = ca("berth test CA")?;
        let server = leaf(
            &root,
            "berthd",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let client = leaf(
            &root,
            "berthctl",
            &["berthctl"],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let other = ca("some other CA")?;
        let other_client = leaf(
            &other,
            "intruder",
            &["intruder"],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        for (file, text) in [
            ("ca.pem", &root.pem),
            ("server.pem", &server.cert),
            ("server-key.pem", &server.key),
            ("client.pem", &client.cert),
            ("client-key.pem", &client.key),
            ("other-ca.pem", &other.pem),
        ] {
            std::fs::write(dir.join(file), text)?;
        }
        Ok(Self {
            dir,
            ca: root.pem,
            client,
            other_ca: other.pem,
            other_client,
        })
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// berthd's TLS flags, with the client CA when `mutual`.
    fn server_args(&self, mutual: bool) -> Vec<String> {
        let mut args = vec![
            "--tls-cert".to_string(),
            self.path("server.pem"),
            "--tls-key".to_string(),
            self.path("server-key.pem"),
        ];
        if mutual {
            args.extend(["--tls-client-ca".to_string(), self.path("ca.pem")]);
        }
        args
    }

    /// Options trusting our CA, presenting `identity` if any.
    fn options(&self, identity: Option<&Leaf>) -> ConnectOptions {
        ConnectOptions {
            ca_cert: Some(self.ca.clone().into_bytes()),
            client_identity: identity
                .map(|l| (l.cert.clone().into_bytes(), l.key.clone().into_bytes())),
            server_name: None,
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A two-node cluster, so that a listing has something concrete to show.
fn cluster_file(dir: &Path) -> Result<String> {
    let path = dir.join("cluster.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Node\nmetadata: {name: tls-a}\nstatus: {allocatable: {cpu: '2', memory: 4Gi, pods: '10'}}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: tls-b}\nstatus: {allocatable: {cpu: '2', memory: 4Gi, pods: '10'}}\n",
    )?;
    Ok(path.display().to_string())
}

async fn start(pki: &Pki, mutual: bool) -> Result<Berthd> {
    let cluster = cluster_file(&pki.dir)?;
    let mut args = vec!["--cluster".to_string(), cluster];
    args.extend(pki.server_args(mutual));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Berthd::start(&args).await
}

/// The serving line says whether TLS and mTLS are on.
fn serving_line(b: &Berthd) -> Result<&serde_json::Value> {
    b.seen
        .iter()
        .find(|l| message(l).starts_with("serving gRPC on"))
        .context("no serving line")
}

async fn node_names(client: &mut Client) -> Result<Vec<String>> {
    Ok(client
        .list("Node", "")
        .await?
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

/// Connects and lists nodes; the error of whichever step failed. (With
/// TLS 1.3 the server checks a client certificate after the client thinks
/// the handshake is done, so a refusal may only show at the first call.)
async fn connect_and_list(addr: &str, options: &ConnectOptions) -> Result<Vec<String>, String> {
    let mut client = Client::connect_with(addr, options)
        .await
        .map_err(|e| e.to_string())?;
    node_names(&mut client).await.map_err(|e| format!("{e:#}"))
}

#[tokio::test]
async fn tls_serves_clients_that_trust_the_ca_and_refuses_others() -> Result<()> {
    let pki = Pki::new("server")?;
    let berthd = start(&pki, false).await?;
    let line = serving_line(&berthd)?;
    assert_eq!(line["fields"]["tls"], true, "{line}");
    assert_eq!(line["fields"]["mtls"], false, "{line}");
    let https = format!("https://{}", berthd.addr);

    // Trusting the CA: the certificate's 127.0.0.1 SAN matches.
    let mut client = Client::connect_with(&https, &pki.options(None)).await?;
    assert_eq!(node_names(&mut client).await?, ["tls-a", "tls-b"]);
    assert!(client.health("").await?);
    assert!(client.health("berth.v1.Scheduler").await?);
    // A bare host:port with TLS options means TLS too, and the server name
    // can be overridden to the certificate's DNS name.
    let options = ConnectOptions {
        server_name: Some("localhost".into()),
        ..pki.options(None)
    };
    let mut client = Client::connect_with(&berthd.addr, &options).await?;
    assert_eq!(node_names(&mut client).await?, ["tls-a", "tls-b"]);

    // A name the certificate does not carry is refused, readably.
    let options = ConnectOptions {
        server_name: Some("berth.invalid".into()),
        ..pki.options(None)
    };
    let err = connect_and_list(&https, &options).await.unwrap_err();
    assert!(
        err.starts_with(&format!("cannot connect to berthd at {https}:")),
        "{err}"
    );
    assert!(err.contains("certificate not valid for name"), "{err}");

    // Trusting another CA: the server's certificate is refused, and the
    // message says why.
    let other = ConnectOptions {
        ca_cert: Some(pki.other_ca.clone().into_bytes()),
        ..Default::default()
    };
    let err = Client::connect_with(&https, &other)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("cannot connect to berthd at {https}:")),
        "{err}"
    );
    assert!(
        err.contains("invalid peer certificate") && err.contains("UnknownIssuer"),
        "{err}"
    );

    // Plaintext against a TLS port gets no answer.
    let err = connect_and_list(
        &format!("http://{}", berthd.addr),
        &ConnectOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(err.contains("transport error"), "{err}");

    // TLS options with an http:// address are refused rather than ignored.
    let err = Client::connect_with(&format!("http://{}", berthd.addr), &pki.options(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("use https://"), "{err}");

    // A CA that is not PEM is reported as such.
    let bad = ConnectOptions {
        ca_cert: Some(b"not a certificate".to_vec()),
        ..Default::default()
    };
    let err = Client::connect_with(&https, &bad)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "TLS options for {https}: CA certificate: no certificate found (expected a PEM \"BEGIN CERTIFICATE\" block)"
        )
    );

    // After all that, the server still serves.
    let mut client = Client::connect_with(&https, &pki.options(None)).await?;
    assert_eq!(node_names(&mut client).await?.len(), 2);
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_from_the_client_ca() -> Result<()> {
    let pki = Pki::new("mutual")?;
    let berthd = start(&pki, true).await?;
    let line = serving_line(&berthd)?;
    assert_eq!(line["fields"]["tls"], true, "{line}");
    assert_eq!(line["fields"]["mtls"], true, "{line}");
    let https = format!("https://{}", berthd.addr);

    // With the client certificate: served.
    let names = connect_and_list(&https, &pki.options(Some(&pki.client))).await;
    assert_eq!(names, Ok(vec!["tls-a".to_string(), "tls-b".to_string()]));

    // Without one: refused, and the connection error says what probably
    // happened. (With TLS 1.3 the refusal comes after the client's side of
    // the handshake; the client checks the connection before returning it.)
    let err = Client::connect_with(&https, &pki.options(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "cannot connect to berthd at {https}: the server closed the connection after the TLS handshake (does it require a client certificate?"
        )),
        "{err}"
    );

    // With one from another CA: refused.
    let err = Client::connect_with(&https, &pki.options(Some(&pki.other_client)))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "cannot connect to berthd at {https}: the server closed the connection after the TLS handshake (did it refuse the client certificate?"
        )),
        "{err}"
    );

    // The server is unharmed by the refusals.
    let names = connect_and_list(&https, &pki.options(Some(&pki.client))).await;
    assert_eq!(names.map(|n| n.len()), Ok(2));
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn grpcurl_speaks_mutual_tls_to_berthd() -> Result<()> {
    let pki = Pki::new("grpcurl")?;
    let berthd = start(&pki, true).await?;
    let grpcurl = |with_client_cert: bool| {
        let mut cmd = tokio::process::Command::new(berth_e2e::grpcurl_path()?);
        cmd.args(["-cacert", &pki.path("ca.pem")]);
        if with_client_cert {
            cmd.args(["-cert", &pki.path("client.pem")]);
            cmd.args(["-key", &pki.path("client-key.pem")]);
        }
        cmd.args([&berthd.addr, "grpc.health.v1.Health/Check"]);
        anyhow::Ok(cmd.kill_on_drop(true).output())
    };
    let out = grpcurl(true)?.await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(answer, serde_json::json!({"status": "SERVING"}));

    // Without a client certificate grpcurl cannot get through. (Whether it
    // reads the server's "certificate required" alert before its write
    // fails is a race, so only the failure to dial is checked.)
    let out = grpcurl(false)?.await?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("Failed to dial target host \"{}\"", berthd.addr)),
        "{stderr}"
    );
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn berthctl_speaks_mutual_tls_to_berthd() -> Result<()> {
    let pki = Pki::new("berthctl")?;
    let berthd = start(&pki, true).await?;
    let berthctl = |tls: &[String]| {
        let mut cmd = tokio::process::Command::new(berth_e2e::berthctl_path()?);
        cmd.args(["-s", &berthd.addr, "-o", "json"])
            .args(tls)
            .args(["get", "nodes"]);
        anyhow::Ok(cmd.kill_on_drop(true).output())
    };
    let with_cert = vec![
        "--tls-ca".to_string(),
        pki.path("ca.pem"),
        "--tls-cert".to_string(),
        pki.path("client.pem"),
        "--tls-key".to_string(),
        pki.path("client-key.pem"),
    ];
    let out = berthctl(&with_cert)?.await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(list["kind"], "List");
    assert!(
        list["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty())
    );

    // Trusting the CA but with no certificate of its own: refused, and the
    // error says which address and why.
    let out = berthctl(&with_cert[..2])?.await?;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: cannot connect to berthd at https://{}",
            berthd.addr
        )),
        "{stderr}"
    );
    // A key without its certificate is a usage error.
    let out = berthctl(&with_cert[4..])?.await?;
    assert_eq!(out.status.code(), Some(2));
    // No TLS flag at all: berthctl speaks plaintext, and says that berthd
    // serves TLS rather than only "transport error".
    let out = berthctl(&[])?.await?;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: berthd at {} serves TLS, and berthctl spoke plaintext: give --tls-ca FILE",
            berthd.addr
        )),
        "{stderr}"
    );
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// Runs berthd with `args` expecting it to stop at startup; its exit code
/// and stderr.
fn fails_to_start(args: &[String]) -> Result<(Option<i32>, String)> {
    let out = std::process::Command::new(berth_e2e::berthd_path()?)
        .args(["--empty-cluster", "--listen", "127.0.0.1:0"])
        .args(args)
        .output()?;
    if out.status.success() {
        bail!("berthd started with {args:?}");
    }
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn bad_tls_files_stop_startup_naming_the_flag_and_file() -> Result<()> {
    let pki = Pki::new("startup")?;
    let s = |x: &str| x.to_string();
    let missing = pki.path("missing.pem");
    std::fs::write(pki.dir.join("garbage.pem"), "hello\n")?;
    let garbage = pki.path("garbage.pem");
    let other_key = KeyPair::generate()?.serialize_pem();
    std::fs::write(pki.dir.join("other-key.pem"), other_key)?;

    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![
                s("--tls-cert"),
                missing.clone(),
                s("--tls-key"),
                pki.path("server-key.pem"),
            ],
            format!("--tls-cert {missing}: No such file or directory"),
        ),
        (
            vec![
                s("--tls-cert"),
                pki.path("server.pem"),
                s("--tls-key"),
                missing.clone(),
            ],
            format!("--tls-key {missing}: No such file or directory"),
        ),
        (
            vec![
                s("--tls-cert"),
                garbage.clone(),
                s("--tls-key"),
                pki.path("server-key.pem"),
            ],
            format!("--tls-cert {garbage}: no certificate found"),
        ),
        (
            // A certificate where the key should be.
            vec![
                s("--tls-cert"),
                pki.path("server.pem"),
                s("--tls-key"),
                pki.path("server.pem"),
            ],
            format!("--tls-key {}: no private key found", pki.path("server.pem")),
        ),
        (
            [
                pki.server_args(false),
                vec![s("--tls-client-ca"), missing.clone()],
            ]
            .concat(),
            format!("--tls-client-ca {missing}: No such file or directory"),
        ),
        (
            [
                pki.server_args(false),
                vec![s("--tls-client-ca"), garbage.clone()],
            ]
            .concat(),
            format!("--tls-client-ca {garbage}: no certificate found"),
        ),
        (
            // A key that does not belong to the certificate.
            vec![
                s("--tls-cert"),
                pki.path("server.pem"),
                s("--tls-key"),
                pki.path("other-key.pem"),
            ],
            format!(
                "--tls-cert {} / --tls-key {}:",
                pki.path("server.pem"),
                pki.path("other-key.pem")
            ),
        ),
    ];
    for (args, want) in cases {
        let (code, stderr) = fails_to_start(&args)?;
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&want),
            "{args:?}: wanted {want:?} in {stderr}"
        );
    }

    // Half a TLS configuration is a usage error (clap's exit code 2).
    let usage: Vec<(Vec<String>, &str)> = vec![
        (
            vec![s("--tls-key"), pki.path("server-key.pem")],
            "--tls-cert <FILE>",
        ),
        (
            vec![s("--tls-cert"), pki.path("server.pem")],
            "--tls-key <FILE>",
        ),
        (
            vec![s("--tls-client-ca"), pki.path("ca.pem")],
            "--tls-cert <FILE>",
        ),
    ];
    for (args, want) in usage {
        let (code, stderr) = fails_to_start(&args)?;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("required arguments were not provided") && stderr.contains(want),
            "{args:?}: {stderr}"
        );
    }
    Ok(())
}
