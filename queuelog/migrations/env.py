import logging
import re
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context
from flask import current_app

from queuelog.database.schema_upgrade import upgrading_in_process

# this is the Alembic Config object, which provides
# access to the values within the .ini file in use.
config = context.config

# Interpret the config file for Python logging.
# Upgrades also run inside the server at start-up; there the app's own logging set-up stays in charge.
if not upgrading_in_process():
    fileConfig(config.config_file_name, disable_existing_loggers=False)
logger = logging.getLogger("alembic.env")


def get_engine():
    return current_app.extensions["migrate"].db.engine


def get_engine_url():
    return get_engine().url.render_as_string(hide_password=False).replace("%", "%%")


# add your model's MetaData object here
# for 'autogenerate' support
# from myapp import mymodel
# target_metadata = mymodel.Base.metadata
config.set_main_option("sqlalchemy.url", get_engine_url())
target_db = current_app.extensions["migrate"].db

# other values from the config, defined by the needs of env.py,
# can be acquired:
# my_important_option = config.get_main_option("my_important_option")
# ... etc.


def get_metadata():
    if hasattr(target_db, "metadatas"):
        return target_db.metadatas[None]
    return target_db.metadata


def run_migrations_offline():
    """Run migrations in 'offline' mode.

    This configures the context with just a URL
    and not an Engine, though an Engine is acceptable
    here as well.  By skipping the Engine creation
    we don't even need a DBAPI to be available.

    Calls to context.execute() here emit the given string to the
    script output.

    """
    url = config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=get_metadata(), literal_binds=True)

    with context.begin_transaction():
        context.run_migrations()


#: Tables of PostgreSQL's layout only (migration a3c5e7f9b1d2): SQLite keeps no days of history to sum.
POSTGRESQL_ONLY = {"closed_days", "closed_day_errors"}


def skip_expression_indexes(obj, name, type_, reflected, compare_to):
    """Leave indexes on expressions, and the tables of PostgreSQL only, out of autogenerate on SQLite.

    SQLite's reflection cannot see an expression such as ix_jobs_claim_order's ``priority DESC``,
    so `flask db check` would report that index as changed on every run. PostgreSQL compares it
    fully; tests/integration/operations/test_migrations.py checks its SQLite definition directly.
    """
    if type_ == "table":
        return name not in POSTGRESQL_ONLY
    if type_ != "index":
        return True
    model_index = compare_to if reflected else obj
    if model_index is None:
        return True
    return all(isinstance(expression, sa.Column) for expression in model_index.expressions)


#: PostgreSQL's layout of jobs and their events (migration d9f4b2c6a8e1, docs/storage.md): partitions, and
#: tables whose indexes and keys live on their partitions rather than where the models declare them.
_PARTITION = re.compile(r"^(jobs_(live|done|before)|jobs_done_\w+|job_events_\w+)$")
_PARTITIONED = {"jobs", "job_events"}


def skip_partitioned_layout(obj, name, type_, reflected, compare_to):
    """Leave PostgreSQL's partitions of jobs and job_events out of autogenerate, with the keys and indexes that
    the partitioned layout places differently: the models describe the tables as SQLite holds them."""
    if type_ == "table":
        return not (reflected and _PARTITION.match(name or ""))
    table = getattr(obj, "table", None)
    if type_ == "column" and table is not None and table.name == "job_events" and name == "bucket":
        return False  # PostgreSQL's partition key of the events, which no query reads
    if type_ in ("index", "unique_constraint") and table is not None and table.name in _PARTITIONED:
        return False
    return not (type_ == "foreign_key_constraint" and obj.referred_table.name == "jobs")


def run_migrations_online():
    """Run migrations in 'online' mode.

    In this scenario we need to create an Engine
    and associate a connection with the context.

    """

    # this callback is used to prevent an auto-migration from being generated
    # when there are no changes to the schema
    # reference: http://alembic.zzzcomputing.com/en/latest/cookbook.html
    def process_revision_directives(context, revision, directives):
        if getattr(config.cmd_opts, "autogenerate", False):
            script = directives[0]
            if script.upgrade_ops.is_empty():
                directives[:] = []
                logger.info("No changes in schema detected.")

    conf_args = current_app.extensions["migrate"].configure_args
    if conf_args.get("process_revision_directives") is None:
        conf_args["process_revision_directives"] = process_revision_directives

    connectable = get_engine()

    with connectable.connect() as connection:
        options = dict(conf_args)
        if options.get("include_object") is None:
            options["include_object"] = (
                skip_expression_indexes if connection.dialect.name == "sqlite" else skip_partitioned_layout
            )
        context.configure(connection=connection, target_metadata=get_metadata(), **options)

        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
