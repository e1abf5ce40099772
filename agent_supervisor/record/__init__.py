"""Record: the incident store (SQLAlchemy 2, Alembic migrations in ``migrations/``)."""
