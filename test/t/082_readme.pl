# Every SQL example of README.md and of docs/*.md runs, in the order the
# page gives them, on a cluster of its own set up as the page says:
#
# - the server configuration is the README's Installation (its
#   "# postgresql.conf" block) and then the page's own "# postgresql.conf"
#   blocks, on a cluster authenticated as a stock Debian one is (passwords
#   over TCP from 127.0.0.1);
# - database app, where the README installs the extension, and the login
#   role app that the pages grant to;
# - a block whose leading comment names a database ("-- On the receiving
#   server, in database inbox, ...") runs there (the test creates that
#   database first), every other block in app;
# - the one change to a block's text: a foreign server's port '5432' becomes
#   the test cluster's port.
#
# After each page, what its examples promise is checked: the Quick start's
# deliveries, the remote route's delivery into the receiving table, pg_cron's
# jobs succeeding in cron.job_run_details, the exporter's grants.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = $ENV{TESTDIR} // '.';

sub slurp_page
{
	my ($file) = @_;
	open my $fh, '<', "$root/$file" or die "$file: $!";
	local $/;
	return <$fh>;
}

# pg_cron, which the pg_cron chapter sets up, is not built for every major
# (its source is not served for 18): where this PostgreSQL lacks it, that
# chapter's blocks are left out and said so, and everything else runs.
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
my $have_cron = -f "$sharedir/extension/pg_cron.control";
note("pg_cron is not installed in $sharedir: the pg_cron chapter's blocks are left out")
  unless $have_cron;

# The blocks of a page, in order: [ 'sql' | 'conf', text ].
sub blocks
{
	my ($text) = @_;
	my @blocks;
	while ($text =~ /^```(sql|ini)\n(.*?)^```$/msg)
	{
		my ($lang, $body) = ($1, $2);
		next if $lang eq 'ini' && $body !~ /\A# postgresql\.conf\n/;
		unless ($have_cron)
		{
			next if $lang eq 'sql' && $body =~ /\bcron\.|\bpg_cron\b/;
			$body =~ s/,pg_cron\b|\bpg_cron,//g;
			$body =~ s/^cron\.[^\n]*\n//mg;
		}
		push @blocks, [ $lang eq 'sql' ? 'sql' : 'conf', $body ];
	}
	return @blocks;
}

my $readme = slurp_page('README.md');
my ($installation) = $readme =~ /^## Installation\n(.*?)^## /ms;
my @install = blocks($installation // '');
ok((grep { $_->[0] eq 'conf' } @install) && (grep { $_->[0] eq 'sql' } @install),
	'the README\'s Installation has a server configuration and SQL');

opendir my $dh, "$root/docs" or die "docs: $!";
my @pages = ('README.md', map { "docs/$_" } sort grep { /\.md$/ } readdir $dh);
closedir $dh;
ok(@pages >= 5, scalar(@pages) . ' pages');

# What the pages' examples promise.
my %checks = (
	'README.md' => sub {
		my ($node) = @_;
		is($node->safe_psql('app',
			q{SELECT count(*), count(delivered_at), max(attempts) FROM outbox.message WHERE topic = 'credits'}),
			'1|1|1', 'the Quick start: one message (the rolled-back one never was), claimed once and delivered');
		is($node->safe_psql('app', 'SELECT count(*) FROM credit'), '1',
			'and its effect applied once');
		ok($node->poll_query_until('app',
			q{SELECT count(*) = 1 AND bool_and(delivered_at IS NOT NULL) FROM outbox.message WHERE topic = 'coupon-notices'}),
			'the worker delivered the routed topic');
	},
	'docs/delivery.md' => sub {
		my ($node) = @_;
		my ($rc, $steps, $err) = $node->psql('app',
			q{SELECT string_agg(step || ' ' || ok, ', ' ORDER BY ord) FROM outbox.check_route('billing') WITH ORDINALITY AS c(step, ok, sqlstate, message, ord)});
		is($steps, 'route true, server true, connect true, prepare true',
			'check_route: every step of the remote example is ok') or diag($err);
		ok($node->poll_query_until('inbox',
			q{SELECT count(*) = 1 FROM audit_log WHERE topic = 'billing' AND envelope->'payload' = '{"invoiceId": 7}'}),
			'the remote route delivered into audit_log, as outbox_in with its password');
		is($node->safe_psql('app',
			q{SELECT count(*), count(delivered_at), count(last_error) FROM outbox.message WHERE topic = 'billing'}),
			'1|1|0', 'and the message is delivered, with no error');
		return unless $have_cron;
		# pg_cron runs on the minute: wait for a run of the drain
		ok($node->poll_query_until('app',
			q{SELECT count(*) > 0 FROM cron.job_run_details d JOIN cron.job j USING (jobid)
			   WHERE j.jobname = 'outbox-drain' AND d.status = 'succeeded'}),
			'pg_cron: the drain job succeeded (cron.job_run_details)');
		is($node->safe_psql('app',
			q{SELECT count(*) FROM cron.job_run_details WHERE status IN ('failed', 'connection failed')}),
			'0', 'pg_cron: no run failed');
	},
	'docs/operations.md' => sub {
		my ($node) = @_;
		my ($rc, $out, $err) = $node->psql('app',
			'SELECT count(*) >= 0 FROM outbox.topic_stats; SELECT count(*) FROM outbox.worker_status()',
			extra_params => [ '-U', 'prometheus', '-v', 'ON_ERROR_STOP=1' ]);
		is($rc, 0, 'the exporter\'s role reads topic_stats and worker_status()') or diag($err);
	},
	'docs/security.md' => sub {
		my ($node) = @_;
		is($node->safe_psql('app',
			q{SELECT string_agg(r, ',' ORDER BY r) FROM (VALUES ('outbox_writer'), ('outbox_consumer')) v(r)
			   WHERE has_function_privilege(r, 'outbox.consume_once(text, uuid)', 'EXECUTE')}),
			'outbox_consumer', 'the recipe grants consume_once to consumers only');
	},
);

for my $page (@pages)
{
	my @blocks = blocks(slurp_page($page));
	next unless grep { $_->[0] eq 'sql' } @blocks;
	(my $name = $page) =~ s{^docs/|\.md$}{}g;
	$name =~ s/\W/_/g;

	my $node = PostgreSQL::Test::Cluster->new("readme_$name");
	$node->init;
	my @conf = grep { $_->[0] eq 'conf' } ($page eq 'README.md' ? () : @install), @blocks;
	$node->append_conf('postgresql.conf', $_->[1]) for @conf;
	$node->append_conf('postgresql.conf', "listen_addresses = '127.0.0.1'");
	# as on Debian: passwords over TCP (local connections are the test's own)
	open my $hba, '>', $node->data_dir . '/pg_hba.conf' or die $!;
	print $hba "local all all trust\n";
	print $hba "host all all 127.0.0.1/32 scram-sha-256\n";
	close $hba;
	$node->start;
	my $port = $node->port;

	$node->safe_psql('postgres', 'CREATE DATABASE app');
	$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');
	my %dbs = (app => 1);

	my @sql = map { $_->[1] } grep { $_->[0] eq 'sql' } @blocks;
	unshift @sql, map { $_->[1] } grep { $_->[0] eq 'sql' } @install unless $page eq 'README.md';
	my $n = 0;
	for my $sql (@sql)
	{
		$n++;
		my ($lead) = $sql =~ /\A((?:\s*--[^\n]*\n)*)/;
		my $db = ($lead =~ /\bin database (\w+)/) ? $1 : 'app';
		$node->safe_psql('postgres', "CREATE DATABASE $db") unless $dbs{$db}++;
		(my $run = $sql) =~ s/\bport '5432'/port '$port'/g;
		my ($first) = $sql =~ /^\s*(?:--[^\n]*\n\s*)*([^\n]*)/;
		my ($rc, $out, $err) = $node->psql($db, $run, extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
		is($rc, 0, "$page, example $n runs in $db: $first") or diag($err);
	}

	$checks{$page}->($node) if $checks{$page};
	$node->stop;
}


done_testing();
