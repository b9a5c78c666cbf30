-- name: CreateOrder :exec
INSERT INTO orders (id, customer, total) VALUES ($1, $2, $3);

-- name: GetOrder :one
SELECT id, customer, total FROM orders WHERE id = $1;
