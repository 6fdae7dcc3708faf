# Every SQL example of the README runs, in the order the README gives them,
# on a cluster set up as the README says (with pg_cron for its recipes).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = $ENV{TESTDIR} // '.';
open my $fh, '<', "$root/README.md" or die "README.md: $!";
my $readme = do { local $/; <$fh> };
close $fh;
my @blocks = ($readme =~ /^```sql\n(.*?)^```$/msg);
ok(@blocks >= 5, scalar(@blocks) . ' SQL examples in the README');

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pg_cron,krizaka_outbox'
cron.database_name = 'app'
cron.use_background_workers = on
max_worker_processes = 16
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');    # the recipe grants to it

my $n = 0;
for my $sql (@blocks)
{
	$n++;
	my ($first) = $sql =~ /^\s*(?:--[^\n]*\n\s*)*([^\n]*)/;
	my ($rc, $out, $err) = $node->psql('app', $sql, extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
	is($rc, 0, "example $n runs: $first") or diag($err);
}

# what the quick start did
is($node->safe_psql('app',
	q{SELECT count(*), count(delivered_at) FROM outbox.message WHERE topic = 'credits'}),
	'1|1', 'the quick start: one message (the rolled-back one never was), delivered');
is($node->safe_psql('app', 'SELECT count(*) FROM credit'), '1', 'and its effect applied once');
$node->stop;
done_testing();
