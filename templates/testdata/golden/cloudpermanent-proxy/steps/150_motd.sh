printf 'Managed by node-manager (%s)\n' 'CloudPermanent' > /etc/motd
