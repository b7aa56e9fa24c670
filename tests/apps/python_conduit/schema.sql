CREATE TABLE tags (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE articles (id integer PRIMARY KEY, slug text NOT NULL, title text NOT NULL);
CREATE TABLE article_tags (
  article_id integer REFERENCES articles (id),
  tag_id integer REFERENCES tags (id),
  PRIMARY KEY (article_id, tag_id)
);
INSERT INTO tags SELECT i, 'tag-' || i FROM generate_series(1, 5) i;
INSERT INTO articles SELECT i, 'article-' || i, 'Article ' || i FROM generate_series(1, 20) i;
INSERT INTO article_tags SELECT a, 1 + (a + k) % 5 FROM generate_series(1, 20) a, generate_series(0, 1) k;
