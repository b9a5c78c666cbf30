-- name: CreateOrder :exec
INSERT INTO orders (id, customer, total) VALUES (?, ?, ?);

-- name: GetOrder :one
SELECT id, customer, total FROM orders WHERE id = ?;
