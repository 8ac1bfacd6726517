"""The ``ringfeed`` command group, its connection options and one-line errors.

Every command that talks to Cassandra takes ``--hosts/--port/--username/--password`` (or RINGFEED_* variables);
the defaults reach the ring started by ``ringfeed local up``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console

from ringfeed.cli.types import PORT
from ringfeed.errors import RingfeedError, ring_error, ring_failures
from ringfeed.ring import (
    DEFAULT_HOSTS,
    DEFAULT_PORT,
    HOSTS_ENV,
    LOCAL_DC_ENV,
    LOGIN_DIR_ENV,
    PASSWORD_ENV,
    PORT_ENV,
    TLS_CA_FILE_ENV,
    TLS_SERVER_NAME_ENV,
    USERNAME_ENV,
    RingRef,
    read_login,
)

# Results go to stdout (console); progress (spinners, bars), errors and hints to stderr (err_console), so that a
# command's output piped into a file or a script holds its result only.
console = Console()
# Piped or redirected, a line stays one line (rich would wrap it at 80 columns); tables: render.print_table.
console.soft_wrap = not console.is_terminal
err_console = Console(stderr=True)


def ringfeed_state_dir(variable: str, name: str) -> Path:
    """``$variable``, else ``$XDG_STATE_HOME/ringfeed/<name>`` (``~/.local/state`` without XDG_STATE_HOME)."""
    state_home = os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")
    return Path(os.environ.get(variable, Path(state_home) / "ringfeed" / name))


def default_local_dir() -> Path:
    return ringfeed_state_dir("RINGFEED_LOCAL_DIR", "local")


class RingfeedGroup(click.Group):
    """Prints RingfeedError (and a failure of the ring, as the RingfeedError of its kind) as one line and exits 1,
    instead of a traceback; a usage error (a bad option value, a missing argument) is one line too, exit 2."""

    def main(self, *args, **kwargs):
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            result = super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.UsageError as error:
            where = f" (see `{error.ctx.command_path} --help`)" if error.ctx is not None else ""
            message = error.format_message().rstrip(".")
            err_console.print(f"[bold red]error:[/] {message}{where}", highlight=False,
                              soft_wrap=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.Abort:
            err_console.print("aborted", highlight=False)
            sys.exit(1)
        # Without standalone mode click returns an Exit's code (--help, --version: 0) or the command's return value.
        sys.exit(result if isinstance(result, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RingfeedError as exc:
            message, hint = str(exc), exc.cli_hint
        except ring_failures() as exc:  # a failure of the ring on the control path (Python driver)
            error = ring_error(exc, f"ringfeed {ctx.invoked_subcommand}")
            message, hint = str(error), error.cli_hint
        # Exit outside the except block: SystemExit would keep the error's traceback as its context, and with it
        # every frame's objects (native sessions) alive into interpreter shutdown.
        err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        if hint:
            err_console.print(f"hint: {hint}", highlight=False, soft_wrap=True)
        sys.exit(1)


@click.group(cls=RingfeedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--hosts", envvar=HOSTS_ENV, default=DEFAULT_HOSTS, show_default=True,
              help=f"Comma-separated Cassandra contact points [env {HOSTS_ENV}].")
@click.option("--port", envvar=PORT_ENV, default=DEFAULT_PORT, show_default=True, type=PORT,
              help=f"CQL port [env {PORT_ENV}].")
@click.option("--username", envvar=USERNAME_ENV, default=None, help=f"[env {USERNAME_ENV}]")
@click.option("--password", envvar=PASSWORD_ENV, default=None, help=f"[env {PASSWORD_ENV}]")
@click.option("--login-dir", envvar=LOGIN_DIR_ENV, default=None, type=click.Path(file_okay=False),
              help="A folder holding the login as files username and password (a mounted Secret), read when "
                   f"--username and --password are not given [env {LOGIN_DIR_ENV}].")
@click.option("--tls-ca-file", envvar=TLS_CA_FILE_ENV, default=None, type=click.Path(dir_okay=False),
              help=f"Connect with TLS, verifying the nodes against this PEM CA certificate [env {TLS_CA_FILE_ENV}].")
@click.option("--tls-server-name", envvar=TLS_SERVER_NAME_ENV, default=None,
              help="With --tls-ca-file: the name every node's certificate must carry, checked instead of the node's "
                   f"IP address (a Ring's Service host name) [env {TLS_SERVER_NAME_ENV}].")
@click.option("--local-dc", envvar=LOCAL_DC_ENV, default=None,
              help=f"Send requests to this datacenter's nodes only [env {LOCAL_DC_ENV}].")
@click.version_option(package_name="ringfeed")
@click.pass_context
def main(ctx, hosts, port, username, password, login_dir, tls_ca_file, tls_server_name, local_dc):
    """Ringfeed: deep-learning training data in an Apache Cassandra ring.

    \b
    Typical session:
      ringfeed local up                        # a real Cassandra node on 127.0.0.1
      ringfeed dataset create pets --key path:text --encoding jpeg
      ringfeed ingest pets ./pets              # ImageFolder, CSV/Parquet manifest or .tar shards
      ringfeed inspect pets
      ringfeed split create pets by-owner --ratios 7,2,1 --group-by owner --seed 1
    """
    # The same reading of the same variables as RingRef.from_env: a Job's `ringfeed` finds the operator's ring.
    if tls_server_name and not tls_ca_file:
        raise click.BadParameter("a server name is checked only with TLS: give --tls-ca-file too",
                                 param_hint="--tls-server-name")
    if login_dir and username is None and password is None:
        try:
            username, password = read_login(login_dir)
        except RingfeedError as error:
            raise click.BadParameter(str(error), param_hint="--login-dir") from None
    ctx.obj = RingRef.parse(hosts, port, local_dc, tls=bool(tls_ca_file), tls_server_name=tls_server_name).login(
        username, password, tls_ca_file)


def open_store(ctx):
    from ringfeed.store import Store

    return Store(ctx.obj)
