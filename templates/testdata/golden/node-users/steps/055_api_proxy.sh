#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The local API proxy: 127.0.0.1:6445 balances over the API servers, so
# the kubelet (and bashible once the node has joined) keep working when
# one of them is down. HAProxy from the OS runs it as its own unit,
# kubernetes-api-proxy; a change of endpoints reloads it without dropping
# connections, a change of the unit restarts it.

bb-write-if-changed /etc/node-manager/kubernetes-api-proxy.cfg 0644 kubernetes-api-proxy-config <<'CFG'
# Managed by node-manager: the API servers of the cluster.
global
  maxconn 8000
  log stdout format raw local0 warning

defaults
  mode tcp
  log global
  option dontlognull
  timeout connect 5s
  timeout client 24h
  timeout server 24h
  timeout tunnel 24h
  default-server inter 5s fall 3 rise 2

frontend kubernetes-api
  bind 127.0.0.1:6445
  default_backend kubernetes-api

backend kubernetes-api
  balance roundrobin
  option tcp-check
  server apiserver-0 10.0.0.10:6443 check
CFG
# A configuration HAProxy refuses is never loaded.
if bb-changed kubernetes-api-proxy-config; then
  haproxy -c -q -f /etc/node-manager/kubernetes-api-proxy.cfg
fi

bb-write-if-changed /etc/systemd/system/kubernetes-api-proxy.service 0644 kubernetes-api-proxy <<'UNIT'
# Managed by node-manager.
[Unit]
Description=Local Kubernetes API proxy (127.0.0.1:6445)
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
ExecStartPre=/usr/sbin/haproxy -c -q -f /etc/node-manager/kubernetes-api-proxy.cfg
ExecStart=/usr/sbin/haproxy -Ws -f /etc/node-manager/kubernetes-api-proxy.cfg
ExecReload=/usr/sbin/haproxy -c -q -f /etc/node-manager/kubernetes-api-proxy.cfg
ExecReload=/bin/kill -USR2 $MAINPID
Restart=always
RestartSec=2
DynamicUser=yes

[Install]
WantedBy=multi-user.target
UNIT
if bb-changed kubernetes-api-proxy; then
  bb-changed-clear kubernetes-api-proxy-config
  bb-unit-converge kubernetes-api-proxy.service kubernetes-api-proxy
else
  bb-unit-converge kubernetes-api-proxy.service kubernetes-api-proxy-config reload
fi
