DROP TABLE IF EXISTS {{name "relays"}};
DROP TABLE IF EXISTS {{name "lanes"}};
