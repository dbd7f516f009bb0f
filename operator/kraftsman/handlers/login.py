"""How the operator logs in to the API server: as a pod, or with a kubeconfig, like kubectl.

Order of controller-runtime's ``config.GetConfig``: ``--kubeconfig``, then ``$KUBECONFIG``,
then the pod's service account (in-cluster), then ``~/.kube/config``. A kubeconfig is read by
kopf's own ``login_with_kubeconfig``; the service account by the Kubernetes client's in-cluster
loader (``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``, token and CA files), as
client-go does. Both are read again at every login, so kopf picks up a rotated token when it
logs in again after a 401. :func:`choose` decides before kopf starts and says in one line what
is missing, so a misconfigured pod exits 2 instead of crash-looping on a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
HOST_ENV, PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"


class NoCredentials(Exception):
    """No way to log in; the message (one line) says what is missing and how to fix it."""


@dataclass(frozen=True)
class Login:
    """Where the credentials come from: ``kubeconfig`` (paths as in $KUBECONFIG) or, when it
    is None, the service account mounted at ``service_account_dir``."""

    kubeconfig: str | None
    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    environ: Mapping[str, str] | None = None  # the in-cluster variables; os.environ if None

    @property
    def source(self) -> str:
        return f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "in-cluster"

    def connection(self, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
        """The credentials now; raises NoCredentials naming what is wrong."""
        if self.kubeconfig is not None:
            return self._from_kubeconfig(settings)
        return self._in_cluster(settings)

    def _from_kubeconfig(self, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
        # kopf's loader reads $KUBECONFIG (os.pathsep-separated, the first value wins).
        os.environ["KUBECONFIG"] = str(self.kubeconfig)
        try:
            info = kopf.login_with_kubeconfig(settings=settings)
        except OSError as e:
            raise NoCredentials(f"kubeconfig {e.filename or self.kubeconfig}: cannot be read "
                                f"({e.strerror}); pass an existing file to --kubeconfig or "
                                "KUBECONFIG") from None
        except yaml.YAMLError as e:
            raise NoCredentials(f"kubeconfig {self.kubeconfig}: not YAML "
                                f"({str(e).splitlines()[0]})") from None
        except kopf.LoginError as e:
            raise NoCredentials(f"kubeconfig {self.kubeconfig}: {e}; set current-context") \
                from None
        except (KeyError, TypeError, AttributeError) as e:
            raise NoCredentials(f"kubeconfig {self.kubeconfig}: the current context names "
                                f"{e} but it is not defined (check contexts, clusters, users)"
                                ) from None
        if info is None or not info.server:
            raise NoCredentials(f"kubeconfig {self.kubeconfig}: the current context's cluster "
                                "has no server")
        return info

    def _in_cluster(self, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
        from kubernetes.client import Configuration
        from kubernetes.config import ConfigException
        from kubernetes.config.incluster_config import InClusterConfigLoader

        sa = self.service_account_dir
        environ = os.environ if self.environ is None else self.environ
        config = Configuration()
        try:
            InClusterConfigLoader(token_filename=str(sa / "token"),
                                  cert_filename=str(sa / "ca.crt"),
                                  environ=environ).load_and_set(config)
            token = (sa / "token").read_text().strip()
        except (ConfigException, OSError) as e:
            raise NoCredentials(f"in-cluster login: {e} (service account directory {sa}); "
                                "mount the service account token "
                                "(automountServiceAccountToken: true)") from None
        ns_file = sa / "namespace"
        namespace = ns_file.read_text().strip() if ns_file.is_file() else None
        return kopf.ConnectionInfo(server=config.host, ca_path=config.ssl_ca_cert,
                                   token=token or None, default_namespace=namespace or None,
                                   trust_env=settings.networking.trust_env)

    def register(self, registry: kopf.OperatorRegistry) -> None:
        """Make this the operator's only login handler."""

        @kopf.on.login(registry=registry)
        def _login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
            try:
                return self.connection(settings)
            except NoCredentials as e:
                raise kopf.LoginError(str(e)) from None


def choose(kubeconfig_flag: str | None, environ: Mapping[str, str],
           service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> Login:
    """Pick the credentials the way controller-runtime does, and check they can be read."""
    home_config = Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"
    if kubeconfig_flag:
        login = Login(kubeconfig_flag, service_account_dir, environ)
    elif environ.get("KUBECONFIG"):
        login = Login(environ["KUBECONFIG"], service_account_dir, environ)
    elif environ.get(HOST_ENV) or environ.get(PORT_ENV):
        login = Login(None, service_account_dir, environ)
    elif home_config.is_file():
        login = Login(str(home_config), service_account_dir, environ)
    else:
        raise NoCredentials(f"no Kubernetes credentials: not in a pod ({HOST_ENV} and "
                            f"{PORT_ENV} are not set) and no kubeconfig (pass --kubeconfig "
                            "FILE or set KUBECONFIG)")
    login.connection(kopf.OperatorSettings())
    return login
