use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('smoke');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');
is($node->safe_psql('postgres', 'SHOW outbox.lease_seconds'), '60', 'lease_seconds default');
$node->stop;
done_testing();
