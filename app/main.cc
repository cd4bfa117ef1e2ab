#include <iostream>

#include "app/cli.h"

extern char** environ;

int main(int argc, char** argv) {
  return kvserve::app::RunCli(argc, argv, environ, std::cout, std::cerr);
}
