//! One command's session: global flags, the kubeconfig (read on first use), the hub client,
//! and the two output streams.

use std::io::Write;

use crate::Output;
use crate::cli::GlobalArgs;
use crate::error::{Error, Result, one_line};
use crate::kubeconfig::{KubeconfigFile, Target};

pub struct Session<'a> {
    pub global: GlobalArgs,
    out: Output<'a>,
    err: Output<'a>,
    kubeconfig: Option<KubeconfigFile>,
}

impl<'a> Session<'a> {
    pub fn new(global: GlobalArgs, out: Output<'a>, err: Output<'a>) -> Self {
        Self {
            global,
            out,
            err,
            kubeconfig: None,
        }
    }

    /// The standard output, for data.
    pub fn out(&mut self) -> &mut (dyn Write + Send) {
        &mut *self.out
    }

    /// Writes one line of results to stdout.
    pub fn say(&mut self, line: impl std::fmt::Display) -> Result<()> {
        writeln!(self.out, "{line}").map_err(Error::Output)
    }

    /// Writes `text` as is to stdout.
    pub fn print(&mut self, text: &str) -> Result<()> {
        self.out.write_all(text.as_bytes()).map_err(Error::Output)
    }

    /// Writes `warning: <line>` to stderr.
    pub fn warn(&mut self, line: impl std::fmt::Display) -> Result<()> {
        writeln!(self.err, "warning: {}", one_line(&line.to_string())).map_err(Error::Output)
    }

    /// Writes `note: <line>` to stderr: advice that is not part of the result.
    pub fn note(&mut self, line: impl std::fmt::Display) -> Result<()> {
        writeln!(self.err, "note: {}", one_line(&line.to_string())).map_err(Error::Output)
    }

    /// Writes the final `error: ...` line.
    pub fn error_line(&mut self, error: &Error) {
        let _ = writeln!(self.err, "error: {}", one_line(&error.to_string()));
    }

    /// The kubeconfig, read on first use.
    pub fn kubeconfig(&mut self) -> Result<&KubeconfigFile> {
        if self.kubeconfig.is_none() {
            self.kubeconfig = Some(KubeconfigFile::load(self.global.kubeconfig.as_deref())?);
        }
        self.kubeconfig
            .as_ref()
            .ok_or_else(|| Error::Refused("the kubeconfig could not be loaded".to_owned()))
    }

    /// `--host-cluster-context`, else the kubeconfig's current context.
    pub fn host_context(&mut self) -> Result<String> {
        if let Some(context) = self.global.host_cluster_context.clone() {
            return Ok(context);
        }
        let kubeconfig = self.kubeconfig()?;
        kubeconfig
            .current_context()
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "kubeconfig {} has no current context; pass --host-cluster-context",
                    kubeconfig.origin()
                ))
            })
    }

    /// A client of the hub.
    pub async fn hub(&mut self) -> Result<Target> {
        let context = self.host_context()?;
        let timeout = self.global.request_timeout;
        let subject = format!("hub cluster {context:?}");
        self.kubeconfig()?.target(&subject, &context, timeout).await
    }

    /// A client of the member cluster `cluster`, reached through `context`.
    pub async fn member(&mut self, cluster: &str, context: &str) -> Result<Target> {
        let timeout = self.global.request_timeout;
        let subject = format!("cluster {cluster:?}");
        self.kubeconfig()?.target(&subject, context, timeout).await
    }

    pub fn kubefed_namespace(&self) -> &str {
        &self.global.kubefed_namespace
    }
}
