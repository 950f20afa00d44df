"""The pre-execution egress check and gateway-level severing (Failure Recovery, "Blast Radius
Quarantine": Example 0.2's policy check, table 12 stage 3's fallback).

Before a tool call runs, the supervisor reads every network destination the call names and
compares it with the sandbox's allow-list (Saltzer and Schroeder's fail-safe default: what is not
listed is refused). A refused destination is the quarantine's trigger in Example 0.2: an injected
``curl`` to a host that is not on the list is caught here, before anything is sent.

* :func:`destinations_of` — the hosts a call names: URLs anywhere in its arguments, the bare
  host of ``curl``/``wget``/``nc``/``ssh``/``scp`` in a shell command, ``host``/``url`` arguments.
  A shell command that does not parse is refused whole (nothing is guessed).
* :class:`EgressPolicy` — the allow-list (exact names, ``*.suffix`` patterns, IP networks) and
  the set of trajectories whose egress is severed at the gateway; immutable.
* :func:`check_tool_call` / :func:`check_destinations` — the decision (:class:`EgressDecision`),
  pure; :meth:`EgressDecision.raise_if_refused` turns a refusal into
  :class:`~kernel_lib.errors.EgressDenied`.
* :class:`EgressGuard` — a thread-safe holder of the current policy for a gateway: ``check``
  before each call, ``sever(trajectory_id)`` to cut one trajectory off (the fallback of stage 3
  where network namespaces are not available: every later call of that trajectory is refused).

Pure except :class:`EgressGuard`'s lock; no sockets, no DNS (a name is compared as written).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from kernel_lib.errors import ConfigError, EgressDenied

__all__ = ["EgressPolicy", "EgressDecision", "EgressGuard", "destinations_of", "hosts_in_command",
           "check_destinations", "check_tool_call", "COMMAND_ARGUMENTS", "NETWORK_COMMANDS", "UNREADABLE"]

#: Argument names whose string value is read as a shell command.
COMMAND_ARGUMENTS = frozenset({"command", "cmd", "script", "shell"})
#: Network commands: the options of each that take a value (the value is not a destination), and
#: which of its positional arguments are destinations: ``all`` (curl and wget take several URLs),
#: ``first`` (the host of nc, telnet, ssh; the rest is a port or a remote command) or ``remote``
#: (scp, rsync: the ``host:path`` and ``user@host:path`` ones).
_NETWORK_COMMANDS: dict[str, tuple[frozenset[str], str]] = {
    "curl": (frozenset("-H -d -o -X -A -u -e -F -T -b -c -x -w -m -K -r -E -U -Y -y -z -C -D -K -Q -t".split()
                       + "--header --data --data-raw --data-binary --data-urlencode --output --request --user-agent "
                         "--user --referer --form --upload-file --cookie --cookie-jar --proxy --max-time "
                         "--connect-timeout --retry --config --resolve --connect-to".split()), "all"),
    "wget": (frozenset("-O -o -a -e -U -P -t -T -w -Q -i -B".split()
                       + "--header --post-data --post-file --user --password --output-document --user-agent "
                         "--tries --timeout".split()), "all"),
    "ssh": (frozenset("-i -p -l -o -F -J -L -R -D -b -c -E -e -m -O -Q -S -W -w -B -I".split()), "first"),
    "scp": (frozenset("-i -P -o -F -l -c -J -S".split()), "remote"),
    "sftp": (frozenset("-i -P -o -F -l -c -J -S -b -B -R -s".split()), "first"),
    "rsync": (frozenset("-e --rsh -f --filter --exclude --include".split()), "remote"),
    "nc": (frozenset("-p -s -w -x -i -q -X -I -O -T -V".split()), "first"),
    "ncat": (frozenset("-p -s -w -x -i -q -c -e".split()), "first"),
    "netcat": (frozenset("-p -s -w -x -i -q".split()), "first"),
    "telnet": (frozenset("-l -n -e -b".split()), "first"),
    "ftp": (frozenset("-P -s".split()), "first"),
    "http": (frozenset(), "all"), "https": (frozenset(), "all"),
}
#: Commands whose positional arguments name destinations even without a URL scheme.
NETWORK_COMMANDS = frozenset(_NETWORK_COMMANDS)
#: Argument names whose string value is a destination (a URL or a bare host).
HOST_ARGUMENTS = frozenset({"url", "host", "hostname", "endpoint", "address", "uri"})
#: Words that end one command of a shell line.
_SEPARATORS = frozenset({";", "&&", "||", "|", "&"})

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$")


#: Words that may stand before a command and run it (``sudo curl``, ``env X=1 timeout 5 curl``): a
#: network command anywhere in a segment that starts with one of them is read as a command.
_WRAPPERS = frozenset({"sudo", "doas", "env", "exec", "nohup", "time", "timeout", "nice", "ionice", "stdbuf",
                       "xargs", "command", "setsid", "strace", "watch", "chronic", "unbuffer", "proxychains",
                       "proxychains4", "torsocks", "busybox", "builtin"})
#: Shells: ``sh -c '...'`` / ``eval '...'`` are read recursively; a shell fed from a pipe runs text
#: the check cannot see, so the line is refused.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "fish", "csh", "tcsh"})
#: Options whose value is itself a destination (a proxy, a jump host, an address to connect to).
_DESTINATION_OPTIONS: dict[str, frozenset[str]] = {
    "curl": frozenset({"-x", "--proxy", "--preproxy", "--socks4", "--socks4a", "--socks5", "--socks5-hostname",
                       "--url", "--resolve", "--connect-to", "--doh-url"}),
    "ssh": frozenset({"-J"}), "scp": frozenset({"-J"}), "sftp": frozenset({"-J"}),
    "nc": frozenset({"-x"}), "ncat": frozenset({"--proxy"}), "wget": frozenset(),
}
#: Options that make the command read its destinations from somewhere the check cannot see (a
#: config file, a URL list): the call is refused.
_OPAQUE_OPTIONS: dict[str, frozenset[str]] = {
    "curl": frozenset({"-K", "--config"}), "wget": frozenset({"-i", "--input-file", "-e", "--execute"}),
    "ssh": frozenset({"-F"}), "scp": frozenset({"-F"}), "sftp": frozenset({"-F"}),
}
#: Redirections: the word after one is a file, not an argument.
_REDIRECTIONS = frozenset({">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|"})
#: Text that makes a shell line's arguments depend on something run or expanded at execution time.
_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
#: The marker put in a call's destinations for one the check cannot read (never on an allow-list).
UNREADABLE = "<unreadable destination>"


def _norm_host(text: str) -> str | None:
    """A destination's host in lower case, without brackets, port or trailing dot; None when the
    text is no host name or IP address. An all-digit name is read as the IPv4 address it
    denotes (``2130706433`` is 127.0.0.1 to ``inet_aton``)."""
    t = text.strip().lower()
    if not t:
        return None
    if "://" in t:
        try:
            h = urlsplit(t).hostname
        except ValueError:
            return None
        return _norm_host(h) if h else None
    if "@" in t:   # user@host[:path] (ssh, scp)
        t = t.rsplit("@", 1)[1]
    if t.startswith("["):   # [v6]:port
        t = t[1:t.index("]")] if "]" in t else t[1:]
    else:
        t = t.split("/", 1)[0]
        if t.count(":") == 1:   # host:port or host:path (scp)
            t = t.split(":", 1)[0]
    t = t.rstrip(".")
    try:
        return str(ipaddress.ip_address(t))
    except ValueError:
        pass
    if t.isdigit():
        n = int(t)
        return str(ipaddress.IPv4Address(n)) if n < 2 ** 32 else None
    return t if _HOSTNAME.match(t) else None


def _url_destination(url: str) -> str | None:
    """The host of a URL the scan found; :data:`UNREADABLE` when it names a host that does not
    read as one (a non-ASCII name, an escaped dot, a broken bracket); None when it names no host
    (``file:///x``)."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return UNREADABLE
    if not netloc:
        return None
    if "\\" in netloc:       # parsers disagree on a backslash (some read it as "/"): not guessed
        return UNREADABLE
    return _norm_host(url) or UNREADABLE


def _words(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def hosts_in_command(command: str) -> list[str]:
    """The destinations a shell command names: every URL, the first non-option argument of a
    network command (:data:`NETWORK_COMMANDS`; ``user@host`` and ``host:path`` forms included,
    behind ``sudo``/``env``/``timeout``-like wrappers too), the value of an option that names a
    proxy or an address to connect to (``curl -x``, ``--resolve``, ``ssh -J``), and what
    ``sh -c`` / ``eval`` would run. A destination the check cannot read (``$HOST``, a non-ASCII
    name, a command substitution, a shell fed from a pipe, a config file of URLs) is returned as
    :data:`UNREADABLE`, which no allow-list admits: what is not understood is refused.

    Raises ConfigError when the command does not parse as shell words (an unclosed quote): the
    check cannot say where it goes, so the caller refuses it."""
    try:
        words = _words(command)
    except ValueError as exc:
        raise ConfigError(f"the command does not parse as shell words ({exc}); its destinations are unknown") from None
    hosts: list[str] = []
    for m in _URL.finditer(command):
        h = _url_destination(m.group(0))
        if h:
            hosts.append(h)
    if _SUBSTITUTION.search(command):
        hosts.append(UNREADABLE)
    start = 0        # index of the first word of the current segment
    for i, w in enumerate(words):
        if w in _SEPARATORS or w in ("(", ")"):
            start = i + 1
            continue
        name = w.rsplit("/", 1)[-1]
        lead = [x for x in words[start:i] if "=" not in x or x.startswith("-")]
        at_start = not lead or lead[0].rsplit("/", 1)[-1] in _WRAPPERS
        if not at_start:
            continue
        if name in _SHELLS or name == "eval":
            rest = words[i + 1:]
            end = next((k for k, x in enumerate(rest) if x in _SEPARATORS), len(rest))
            rest = rest[:end]
            if name == "eval":
                hosts += hosts_in_command(" ".join(rest))
            elif "-c" in rest and rest.index("-c") + 1 < len(rest):
                hosts += hosts_in_command(rest[rest.index("-c") + 1])
            elif i and words[i - 1] == "|" or not any(not x.startswith("-") for x in rest):
                hosts.append(UNREADABLE)    # the shell runs what the pipe (or a here-string) feeds it
            continue
        spec = _NETWORK_COMMANDS.get(name)
        if spec is None:
            continue
        takes_value, which = spec
        dest_opts = _DESTINATION_OPTIONS.get(name, frozenset())
        opaque_opts = _OPAQUE_OPTIONS.get(name, frozenset())
        positional: list[str] = []
        listening = False
        j = i + 1
        while j < len(words) and words[j] not in _SEPARATORS and words[j] not in ("(", ")"):
            a = words[j]
            if a in _REDIRECTIONS:
                j += 2
                continue
            if a.isdigit() and j + 1 < len(words) and words[j + 1] in _REDIRECTIONS:
                j += 1          # the fd of "2> err"
                continue
            if a.startswith("-") and len(a) > 1:
                opt, _, inline = a.partition("=")
                if not inline and not opt.startswith("--") and len(opt) > 2:
                    opt, inline = opt[:2], opt[2:]      # "-xproxy:1" is "-x proxy:1"
                    if opt not in takes_value and opt not in dest_opts and opt not in opaque_opts:
                        opt, inline = a, ""             # a cluster of flags ("-sSL")
                value = inline if inline else (words[j + 1] if opt in takes_value | dest_opts | opaque_opts
                                               and j + 1 < len(words) else None)
                if opt in opaque_opts:
                    hosts.append(UNREADABLE)
                elif opt in dest_opts and value is not None:
                    if opt in ("--resolve", "--connect-to"):
                        parts = value.split(":")
                        target = ":".join(parts[2:]) if opt == "--resolve" else (parts[2] if len(parts) > 2 else "")
                        hosts.append(_norm_host(target.strip("[]")) or UNREADABLE)
                    else:
                        hosts.append((_url_destination(value) if "://" in value else _norm_host(value))
                                     or UNREADABLE)
                if name in ("nc", "ncat", "netcat") and (opt == "--listen" or not opt.startswith("--")
                                                         and "l" in opt[1:]):
                    listening = True        # a listener names a local port, not a destination
                j += 2 if (not inline and value is not None and opt in takes_value | dest_opts | opaque_opts) else 1
                continue
            positional.append(a)
            j += 1
        if listening:
            continue
        if which == "first":
            positional = positional[:1]
        elif which == "remote":
            positional = [a for a in positional if ":" in a and not a.startswith(("/", "./"))]
        for a in positional:
            if "://" in a:
                continue   # found by the URL scan
            hosts.append(_norm_host(a) or UNREADABLE)
    return list(dict.fromkeys(hosts))


def _strings(value: Any, key: str | None = None) -> Iterable[tuple[str | None, str]]:
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, (bytes, bytearray)):
        yield key, bytes(value).decode("latin-1")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v, key)


def destinations_of(tool: str, arguments: Mapping[str, Any]) -> tuple[str, ...]:
    """Every host a tool call names, in order of appearance, without repeats: URLs in any string
    argument (nested ones too), the hosts of a command argument (:data:`COMMAND_ARGUMENTS`, read
    by :func:`hosts_in_command`), and the value of a host argument (:data:`HOST_ARGUMENTS`).

    Raises ConfigError for a command argument that does not parse (see :func:`hosts_in_command`)
    or arguments that are not a mapping."""
    if not isinstance(arguments, Mapping):
        raise ConfigError(f"a tool call's arguments must be a mapping, got {type(arguments).__name__}")
    hosts: list[str] = []
    for key, text in _strings(arguments):
        k = (key or "").lower()
        if k in COMMAND_ARGUMENTS:
            hosts += hosts_in_command(text)
            continue
        if k in HOST_ARGUMENTS and text.strip():
            hosts.append(_norm_host(text) or UNREADABLE)
        for m in _URL.finditer(text):
            h = _url_destination(m.group(0))
            if h:
                hosts.append(h)
    return tuple(dict.fromkeys(hosts))


@dataclass(frozen=True)
class EgressPolicy:
    """A sandbox's egress allow-list, and the trajectories whose egress is severed.

    ``allowed_hosts``: exact host names or IP addresses, or ``*.example.org`` (any name below
    example.org, not example.org itself). ``allowed_networks``: IP networks in CIDR form
    (``10.213.0.0/16``). ``severed``: trajectory ids refused whatever their destination.

    Raises ConfigError for a pattern or network that does not parse."""

    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[str, ...] = ()
    severed: frozenset[str] = frozenset()
    _networks: tuple[Any, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.allowed_hosts, str) or isinstance(self.allowed_networks, str):
            raise ConfigError("allowed_hosts and allowed_networks are collections of names, not one string")
        hosts = set()
        for h in self.allowed_hosts:
            if not isinstance(h, str):
                raise ConfigError(f"an allowed host must be a string, got {h!r}")
            n = h.strip().lower()
            core = n[2:] if n.startswith("*.") else n
            if _norm_host(core) is None:
                raise ConfigError(f"allowed host {h!r} is not a host name, IP address or *.suffix pattern")
            hosts.add(("*." + _norm_host(core)) if n.startswith("*.") else _norm_host(core))
        nets = []
        for c in self.allowed_networks:
            try:
                nets.append(ipaddress.ip_network(c, strict=False))
            except (ValueError, TypeError):
                raise ConfigError(f"allowed network {c!r} is not an IP network in CIDR form") from None
        object.__setattr__(self, "allowed_hosts", frozenset(hosts))
        object.__setattr__(self, "allowed_networks", tuple(str(n) for n in nets))
        object.__setattr__(self, "severed", frozenset(self.severed))
        object.__setattr__(self, "_networks", tuple(nets))

    def allows_host(self, host: str) -> bool:
        """Is ``host`` (a name or address as a call names it) on the allow-list?"""
        h = _norm_host(host)
        if h is None:
            return False
        if h in self.allowed_hosts:
            return True
        if any(p.startswith("*.") and h.endswith(p[1:]) for p in self.allowed_hosts):
            return True
        try:
            ip = ipaddress.ip_address(h)
        except ValueError:
            return False
        return any(ip in n for n in self._networks)

    def sever(self, trajectory_id: str) -> "EgressPolicy":
        """This policy with ``trajectory_id``'s egress severed (every later call refused)."""
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise ConfigError(f"trajectory_id must be a non-empty string, got {trajectory_id!r}")
        return replace(self, severed=self.severed | {trajectory_id})


@dataclass(frozen=True)
class EgressDecision:
    """The answer of the pre-execution egress check. ``allowed``: the call may run.
    ``destinations``: the hosts it names; ``refused_host``: the first one off the list (None when
    the call was refused as severed or unparseable, or allowed); ``severed``: the trajectory's
    egress is cut; ``reason``: in words."""

    allowed: bool
    trajectory_id: str
    tool: str
    destinations: tuple[str, ...]
    reason: str
    refused_host: str | None = None
    severed: bool = False

    def raise_if_refused(self) -> "EgressDecision":
        """Raise :class:`~kernel_lib.errors.EgressDenied` when refused; else return self."""
        if not self.allowed:
            raise EgressDenied(f"{self.trajectory_id}: {self.tool} refused before execution: {self.reason}",
                               host=self.refused_host, trajectory_id=self.trajectory_id, severed=self.severed)
        return self

    def to_json(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "trajectory_id": self.trajectory_id, "tool": self.tool,
                "destinations": list(self.destinations), "refused_host": self.refused_host,
                "severed": self.severed, "reason": self.reason}


def check_destinations(policy: EgressPolicy, trajectory_id: str, tool: str,
                       destinations: Iterable[str]) -> EgressDecision:
    """The decision for a call of ``tool`` by ``trajectory_id`` naming ``destinations``: refused
    when the trajectory is severed, or when any destination is off the allow-list; allowed
    otherwise (a call naming no destination is allowed: it stays on the host)."""
    dests = tuple(destinations)
    if trajectory_id in policy.severed:
        return EgressDecision(False, trajectory_id, tool, dests, "the trajectory's egress is severed (quarantine)",
                              severed=True)
    for h in dests:
        if not policy.allows_host(h):
            return EgressDecision(False, trajectory_id, tool, dests, f"destination {h} is not on the egress "
                                  "allow-list", refused_host=h)
    return EgressDecision(True, trajectory_id, tool, dests, "every destination is on the allow-list" if dests
                          else "the call names no network destination")


def check_tool_call(policy: EgressPolicy, trajectory_id: str, tool: str,
                    arguments: Mapping[str, Any]) -> EgressDecision:
    """The pre-execution check of one tool call (Example 0.2's policy engine): its destinations
    (:func:`destinations_of`) against ``policy``. A command that does not parse is refused."""
    if trajectory_id in policy.severed:
        return check_destinations(policy, trajectory_id, tool, ())
    try:
        dests = destinations_of(tool, arguments)
    except ConfigError as exc:
        return EgressDecision(False, trajectory_id, tool, (), f"refused by default: {exc}")
    return check_destinations(policy, trajectory_id, tool, dests)


class EgressGuard:
    """The current :class:`EgressPolicy` of a gateway, shared by its threads.

    ``check(trajectory_id, tool, arguments)`` decides one call; ``sever(trajectory_id)`` cuts a
    trajectory off at the gateway (stage 3's fallback) and returns the milliseconds it took
    to install the new policy as measured by ``clock`` (seconds; default: none measured, 0.0).
    """

    def __init__(self, policy: EgressPolicy, *, clock: Any = None):
        if not isinstance(policy, EgressPolicy):
            raise ConfigError(f"policy must be an EgressPolicy, got {type(policy).__name__}")
        self._policy = policy
        self._lock = threading.Lock()
        self._clock = clock

    @property
    def policy(self) -> EgressPolicy:
        return self._policy

    def check(self, trajectory_id: str, tool: str, arguments: Mapping[str, Any]) -> EgressDecision:
        return check_tool_call(self._policy, trajectory_id, tool, arguments)

    def sever(self, trajectory_id: str) -> float:
        t0 = self._clock() if self._clock else 0.0
        with self._lock:
            self._policy = self._policy.sever(trajectory_id)
        return (self._clock() - t0) * 1000.0 if self._clock else 0.0

    def is_severed(self, trajectory_id: str) -> bool:
        return trajectory_id in self._policy.severed
