-- The orders table; the same statement as internal/shop.OrdersDDL.
CREATE TABLE orders (
	id varchar(64) PRIMARY KEY,
	customer varchar(64) NOT NULL,
	total bigint NOT NULL
);
