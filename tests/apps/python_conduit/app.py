"""An articles API in the shape of the RealWorld "Conduit" Flask backends: Flask, SQLAlchemy 2
with a lazy many-to-many relationship, psycopg2, served by gunicorn's sync workers and
instrumented by the stock `opentelemetry-instrument` (SQLAlchemy's and psycopg2's
instrumentations both on, as it turns them on). Nothing here knows about kiln.

GET /api/articles lists ARTICLES articles with their tags. With CONDUIT_FIXED unset, each
article's tags load lazily while the list is serialized (1 + ARTICLES statements: an N+1 at
the `tagList` line); with CONDUIT_FIXED=1 they come in one more statement (selectinload).
The tables are made and filled by the test (tests/apps/python_conduit/schema.sql).
"""
import os

from flask import Flask, jsonify
from sqlalchemy import Column, ForeignKey, Integer, String, Table, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Session, relationship, selectinload

ARTICLES = int(os.environ.get("ARTICLES", "10"))
FIXED = os.environ.get("CONDUIT_FIXED") == "1"


class Base(DeclarativeBase):
    pass


article_tags = Table(
    "article_tags",
    Base.metadata,
    Column("article_id", ForeignKey("articles.id"), primary_key=True),
    Column("tag_id", ForeignKey("tags.id"), primary_key=True),
)


class Tag(Base):
    __tablename__ = "tags"
    id = Column(Integer, primary_key=True)
    name = Column(String, nullable=False)


class Article(Base):
    __tablename__ = "articles"
    id = Column(Integer, primary_key=True)
    slug = Column(String, nullable=False)
    title = Column(String, nullable=False)
    tags = relationship(Tag, secondary=article_tags, lazy="select")


engine = create_engine(os.environ["DATABASE_URL"], pool_size=2)
app = Flask(__name__)


def article_json(article):
    return {
        "slug": article.slug,
        "title": article.title,
        "tagList": [t.name for t in article.tags],  # conduit: tag list
    }


@app.get("/api/articles")
def list_articles():
    with Session(engine) as session:
        query = select(Article).order_by(Article.id).limit(ARTICLES)
        if FIXED:
            query = query.options(selectinload(Article.tags))
        articles = session.scalars(query).all()
        return jsonify({"articles": [article_json(a) for a in articles]})
