# Sourced by tap.sh and veth.sh: the work dir, the 32 MiB file, and the kosoku.conf both use.
G=${GP_WORK:-/tmp/kosoku-goodput}
mkdir -p $G/www
[ -f $G/www/32m.bin ] || head -c 33554432 /dev/urandom > $G/www/32m.bin
# write_conf DIR LISTEN [HEAD]: one worker on CPU 0, sendfile on, the file's dir as root; HEAD goes first.
write_conf() {
  printf '%s%s\n' "${3:-}" "worker_processes 1;
worker_cpu_affinity 1;
error_log $1/error.log notice;
http {
    access_log off;
    sendfile on;
    server { listen $2; root $G/www; }
}" > $1/kosoku.conf
}
