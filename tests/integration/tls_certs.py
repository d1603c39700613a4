"""Test certificates made with the openssl CLI (OpenSSL 3): a private CA, intermediates, RSA-2048 and ECDSA P-256
leaf certificates for names like a.test, *.w.test, default.test, and full-chain files.

    ca = tls_certs.CA(tmp / "pki")                   # root CA, ECDSA P-256, "kosoku test root CA"
    leaf = ca.leaf("a.test")                         # RSA-2048 leaf, CN=a.test, SAN DNS:a.test
    ec = ca.leaf("a.test", kind="ec", tag="a-ec")    # ECDSA P-256 leaf for the same name
    wild = ca.leaf("*.w.test")                       # CN=*.w.test, SAN DNS:*.w.test
    inter = ca.intermediate("kosoku test intermediate")
    chained = inter.leaf("c.test")                   # chained.cert = leaf + intermediate (what ssl_certificate takes)
    leaf.cert, leaf.key, leaf.chain, ca.cert         # paths; leaf.chain is the leaf with its intermediates

Used by test_tls.py and bench/run-https. Everything is written under the directory given; nothing is global.
"""
from __future__ import annotations

import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = "openssl"


def _run(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> bytes:
    p = subprocess.run([OPENSSL, *args], cwd=cwd, input=stdin, capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({p.returncode}):\n{p.stderr.decode(errors='replace')}")
    return p.stdout


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", name.replace("*", "star"))


def genkey(path: Path, kind: str = "rsa") -> Path:
    """A private key: kind "rsa" (2048 bits) or "ec" (P-256), PEM (PKCS#8)."""
    if kind == "rsa":
        _run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(path))
    elif kind == "ec":
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    else:
        raise ValueError(kind)
    path.chmod(0o644)  # nginx's workers (and the master running as any user) read it; these are test keys
    return path


@dataclass
class Leaf:
    name: str          # the first DNS name (CN)
    kind: str          # rsa | ec
    cert: Path         # the leaf alone
    key: Path
    chain: Path        # the leaf followed by the issuing intermediates (for ssl_certificate)
    subject_cn: str

    @property
    def fullchain(self) -> Path:
        return self.chain


class CA:
    """A certificate authority: a key and a self-signed (root) or parent-signed (intermediate) certificate."""

    def __init__(self, directory: Path, cn: str = "kosoku test root CA", kind: str = "ec",
                 parent: "CA | None" = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cn = cn
        self.parent = parent
        base = _safe(cn).replace(" ", "_")
        self.key = genkey(self.dir / f"{base}.key", kind)
        self.cert = self.dir / f"{base}.crt"
        ext = self.dir / f"{base}.ext"
        ext.write_text("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
                       "subjectKeyIdentifier=hash\n" + ("authorityKeyIdentifier=keyid\n" if parent else ""))
        if parent is None:
            _run("req", "-x509", "-new", "-key", str(self.key), "-subj", f"/CN={cn}", "-days", "3650",
                 "-sha256", "-set_serial", str(secrets.randbits(63)), "-extensions", "v3_ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", str(self.cert))
        else:
            csr = self.dir / f"{base}.csr"
            _run("req", "-new", "-key", str(self.key), "-subj", f"/CN={cn}", "-out", str(csr))
            _run("x509", "-req", "-in", str(csr), "-CA", str(parent.cert), "-CAkey", str(parent.key),
                 "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256",
                 "-extfile", str(ext), "-out", str(self.cert))
        self.cert.chmod(0o644)

    def chain_certs(self) -> list[Path]:
        """This CA's certificate and its parents' up to (not including) the root: what a server sends."""
        out: list[Path] = []
        ca: CA | None = self
        while ca is not None and ca.parent is not None:
            out.append(ca.cert)
            ca = ca.parent
        return out

    def root(self) -> "CA":
        return self if self.parent is None else self.parent.root()

    def intermediate(self, cn: str = "kosoku test intermediate CA", kind: str = "ec") -> "CA":
        return CA(self.dir / _safe(cn).replace(" ", "_"), cn, kind, parent=self)

    def leaf(self, name: str, kind: str = "rsa", tag: str | None = None, sans: list[str] | None = None,
             org: str | None = None, days: int = 825) -> Leaf:
        """A server certificate for `name` (CN and first SAN) plus `sans`, signed by this CA."""
        tag = tag or f"{_safe(name)}-{kind}"
        key = genkey(self.dir / f"{tag}.key", kind)
        csr = self.dir / f"{tag}.csr"
        cert = self.dir / f"{tag}.crt"
        subj = f"/CN={name}" + (f"/O={org}" if org else "")
        _run("req", "-new", "-key", str(key), "-subj", subj, "-out", str(csr))
        names = [name] + [s for s in (sans or []) if s != name]
        ext = self.dir / f"{tag}.ext"
        usage = "digitalSignature,keyEncipherment" if kind == "rsa" else "digitalSignature"
        ext.write_text("basicConstraints=critical,CA:FALSE\n"
                       f"keyUsage=critical,{usage}\n"
                       "extendedKeyUsage=serverAuth\n"
                       "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
                       "subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")
        _run("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
             "-set_serial", str(secrets.randbits(63)), "-days", str(days), "-sha256",
             "-extfile", str(ext), "-out", str(cert))
        cert.chmod(0o644)
        chain = self.dir / f"{tag}.chain.crt"
        chain.write_bytes(cert.read_bytes() + b"".join(p.read_bytes() for p in self.chain_certs()))
        chain.chmod(0o644)
        return Leaf(name, kind, cert, key, chain, name)


def ticket_key(path: Path, size: int = 80) -> Path:
    """An ssl_session_ticket_key file: `openssl rand 80` (nginx takes 48 or 80 bytes)."""
    _run("rand", "-out", str(path), str(size))
    path.chmod(0o644)
    return path


def subject(cert: Path) -> str:
    """`openssl x509 -noout -subject` of a PEM file, e.g. 'subject=CN = a.test'."""
    return _run("x509", "-in", str(cert), "-noout", "-subject").decode().strip()
